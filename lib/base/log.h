/*
 * Logging, FERRY_LOG=warn|info|debug.
 */
#ifndef FERRY_BASE_LOG_H
#define FERRY_BASE_LOG_H


enum ferry__log_level { FERRY__LOG_WARN = 1, FERRY__LOG_INFO, FERRY__LOG_DEBUG };

/* Level from FERRY_LOG=warn|info|debug (default warn), read once. */
int ferry__log_level(void);
void ferry__log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define FERRY_LOG_WARN(...) ferry__log(FERRY__LOG_WARN, __VA_ARGS__)
#define FERRY_LOG_INFO(...)                                                       \
    do {                                                                      \
        if (ferry__log_level() >= FERRY__LOG_INFO)                            \
            ferry__log(FERRY__LOG_INFO, __VA_ARGS__);                         \
    } while (0)
#define FERRY_LOG_DEBUG(...)                                                      \
    do {                                                                      \
        if (ferry__log_level() >= FERRY__LOG_DEBUG)                           \
            ferry__log(FERRY__LOG_DEBUG, __VA_ARGS__);                        \
    } while (0)

#endif /* FERRY_BASE_LOG_H */
