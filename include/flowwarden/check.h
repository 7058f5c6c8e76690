/*
 * check.h - FW_ASSERT: the rules the code relies on, checked in Debug and
 * sanitizer builds (FW_CHECKS, set by CMake) and compiled out otherwise.
 * A broken rule is a flowwarden bug: it is logged with where, and the
 * process aborts, so a test run cannot pass over it.
 */
#ifndef FLOWWARDEN_CHECK_H
#define FLOWWARDEN_CHECK_H

_Noreturn void fw_check_failed (const char *cond, const char *file, int line, const char *func);

#ifdef FW_CHECKS
#define FW_ASSERT(cond) ((cond) ? (void) 0 : fw_check_failed (#cond, __FILE__, __LINE__, __func__))
#define FW_CHECKING 1
#else
#define FW_ASSERT(cond) ((void) 0)
#define FW_CHECKING 0
#endif

#endif
