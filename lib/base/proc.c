/*
 * What /proc says of a process (proc.h).
 */
#include "base/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool ferry__proc_start_time(pid_t pid, unsigned long long *start)
{
    char path[64], buf[1024], *p;
    size_t n;
    FILE *f;

    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/stat");
    else
        snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    if ((f = fopen(path, "re")) == NULL)
        return false;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and ')': fields are
     * counted from its last ')', each after a space, field 3 (the state)
     * the first. */
    if ((p = strrchr(buf, ')')) == NULL || p[1] != ' ' || p[2] == 'Z' ||
        p[2] == 'X')
        return false;
    for (int field = 3; field <= 22 && p != NULL; field++)
        p = strchr(p + 1, ' ');
    if (p == NULL)
        return false;
    *start = strtoull(p + 1, NULL, 10);
    return true;
}

unsigned long long ferry__proc_pid_namespace(void)
{
    struct stat st;

    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino
                                                : 0;
}
