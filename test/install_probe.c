/* Built by test/install.sh against an installed copy of ferry, with the
 * flags from its ferry.pc: proves that the installed headers, library and
 * pkg-config file work for a program outside the source tree. */
#include <ferry.h>
#include <stdio.h>

int main(void)
{
	const char *version = ferry_version_string();
	const char *msg = ferry_strerror(-22);

	printf("ferry_version_string() = %s\n", version ? version : "(null)");
	printf("ferry_strerror(-22) = %s\n", msg ? msg : "(null)");
	return version && msg ? 0 : 1;
}
