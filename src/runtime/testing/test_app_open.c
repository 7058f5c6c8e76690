/*
 * test_app_open.c - the C core module of flowwarden.testing (test_app.h):
 * the functions of test_app.c (loading, delivering, the clock, metrics) and
 * test_app_replay.c (dead letters, the in-memory DLQ, sequences) as one
 * table. The top of the testing core: nothing calls into it but Lua.
 */
#include <lauxlib.h>

#include "runtime/testing/test_app-private.h"
#include "runtime/testing/test_app.h"

int
fw_test_app_open (lua_State *L)
{
   static const luaL_Reg fns[] = {{"load", fw_test__load},
                                  {"streams", fw_test__streams},
                                  {"deliver", fw_test__deliver},
                                  {"deliver_batch", fw_test__deliver_batch},
                                  {"replay_one", fw_test__replay_one},
                                  {"now", fw_test__now},
                                  {"advance", fw_test__advance},
                                  {"dlq_entries", fw_test__dlq_entries},
                                  {"dlq_put", fw_test__dlq_put},
                                  {"seq_read", fw_test__seq_read},
                                  {"seq_close", fw_test__seq_close},
                                  {"dlq_sequences", fw_test__dlq_sequences},
                                  {"metrics_text", fw_test__metrics_text},
                                  {"events_from", fw_test_events_from},
                                  {"check_document", fw_test__check_document},
                                  {NULL, NULL}};

   fw_test__open_metatables (L);
   luaL_newlib (L, fns);
   return 1;
}
