/*
 * standin_process.h - starts and stops the MongoDB stand-in
 * (tests/standin/mongo_standin.py --port 0) for the C tests that need a
 * server: test_standin_libmongoc.c, test_lease.c, test_mongo_lua.c,
 * test_server_probe.c (a standalone, another set), test_checkpoint_ordered.c.
 * Static functions, so each file uses what it needs; a file whose tests share
 * one stand-in starts and stops it in its group setup and teardown
 * (standin_group_start, standin_group_stop).
 */
#ifndef FLOWWARDEN_STANDIN_PROCESS_H
#define FLOWWARDEN_STANDIN_PROCESS_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mongoc/mongoc.h>

#ifndef FW_SOURCE_DIR
#error "FW_SOURCE_DIR must be defined (the source tree root, as a string)"
#endif

#define STANDIN_SCRIPT FW_SOURCE_DIR "/tests/standin/mongo_standin.py"

typedef struct {
   pid_t pid;
   char uri[128]; /* mongodb://127.0.0.1:<port>/?replicaSet=rs0 */
} standin_t;

static inline double
now_s (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_MONOTONIC, &ts);
   return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* Starts the stand-in with up to two more options (NULL: none, e.g.
 * "--standalone", or "--replset", "other") and waits (at most 30 s) for its
 * "ready 127.0.0.1:<port>" line; fills s (its uri names replica set rs0
 * whatever the options). False (with a message on stderr) when it did not
 * become ready. */
static inline bool
standin_start_with (standin_t *s, const char *opt1, const char *opt2)
{
   int fds[2];
   char line[256] = {0};
   size_t len = 0;
   unsigned int port = 0;
   double deadline = now_s () + 30.0;
   pid_t pid;

   if (pipe (fds) != 0 || (pid = fork ()) < 0) {
      return false;
   }
   if (pid == 0) {
      /* A test that dies (an abort, a sanitizer report) takes the stand-in
       * with it: an orphan would hold ctest's output pipe open forever. */
      prctl (PR_SET_PDEATHSIG, SIGKILL);
      dup2 (fds[1], STDOUT_FILENO);
      close (fds[0]);
      close (fds[1]);
      execl ("/usr/bin/python3", "python3", STANDIN_SCRIPT, "--port", "0", opt1, opt2,
             (char *) NULL);
      fprintf (stderr, "exec /usr/bin/python3 failed: %s\n", strerror (errno));
      _exit (127);
   }
   close (fds[1]);
   while (len < sizeof line - 1 && (len == 0 || line[len - 1] != '\n')) {
      struct pollfd p = {.fd = fds[0], .events = POLLIN};
      int left_ms = (int) ((deadline - now_s ()) * 1000);
      if (left_ms <= 0 || poll (&p, 1, left_ms) <= 0 || read (fds[0], line + len, 1) <= 0) {
         break;
      }
      len++;
   }
   close (fds[0]);
   if (sscanf (line, "ready 127.0.0.1:%u", &port) != 1) {
      fprintf (stderr, "stand-in did not become ready (got: '%s')\n", line);
      kill (pid, SIGKILL);
      waitpid (pid, NULL, 0);
      return false;
   }
   s->pid = pid;
   snprintf (s->uri, sizeof s->uri, "mongodb://127.0.0.1:%u/?replicaSet=rs0", port);
   return true;
}

/* standin_start_with, no more options: a one-node replica set rs0. */
static inline bool
standin_start (standin_t *s)
{
   return standin_start_with (s, NULL, NULL);
}

/* Stops the stand-in with SIGTERM and returns its wait status (-1 when it
 * was not running). */
static inline int
standin_stop (standin_t *s)
{
   int status = -1;
   if (s->pid > 0) {
      kill (s->pid, SIGTERM);
      waitpid (s->pid, &status, 0);
      s->pid = 0;
   }
   return status;
}

/* A group of cmocka tests sharing one stand-in (a group's setup): libmongoc
 * initialised and s started. 0, or -1 when the stand-in did not start. */
static inline int
standin_group_start (standin_t *s)
{
   mongoc_init ();
   return standin_start (s) ? 0 : -1;
}

/* The group's teardown: s stopped, then libmongoc cleaned up (free what
 * the group kept of libmongoc's before). 0 when the stand-in exited with 0. */
static inline int
standin_group_stop (standin_t *s)
{
   int status = standin_stop (s);
   mongoc_cleanup ();
   return (WIFEXITED (status) && WEXITSTATUS (status) == 0) ? 0 : -1;
}

#endif
