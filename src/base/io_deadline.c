/*
 * io_deadline.c - a stream wrapper that clamps libmongoc's socket timeouts
 * to the calling thread's deadline (see io_deadline.h).
 */
#include <errno.h>
#include <time.h>

#include "flowwarden/clock.h"
#include "flowwarden/io_deadline.h"

/* Exported by libmongoc 1.23 but declared only in its private headers.
 * user_data is the client (its TLS options). */
mongoc_stream_t *mongoc_client_default_stream_initiator (const mongoc_uri_t *uri,
                                                         const mongoc_host_list_t *host,
                                                         void *user_data, bson_error_t *error);

/* A type no libmongoc stream uses (theirs are 1..7), so code that looks for
 * a socket or TLS stream by type walks past the wrapper to its base. */
#define DEADLINE_STREAM_TYPE 0x4657

typedef struct {
   mongoc_stream_t vtable; /* first: libmongoc casts the struct to it */
   mongoc_stream_t *base;
   bool timed_out; /* the last read or write was refused: deadline passed */
} deadline_stream_t;

static __thread int64_t thread_deadline_ns;
static __thread bool thread_hit;

void
fw_io_deadline_set (int64_t deadline_ns)
{
   thread_deadline_ns = deadline_ns;
   if (deadline_ns) {
      thread_hit = false;
   }
}

bool
fw_io_deadline_hit (void)
{
   return thread_hit;
}

int64_t
fw_io_deadline_get (void)
{
   return thread_deadline_ns;
}

bool
fw_io_deadline_passed (void)
{
   return thread_deadline_ns && fw_mono_ns () >= thread_deadline_ns;
}

/*
 * The timeout a read or write may use: timeout_msec (negative: libmongoc's
 * "no limit") bounded by what is left of the thread's deadline, rounded up
 * to 1 ms while any is left; *clamped tells whether the deadline is what
 * bounds it. Returns false when the deadline has passed.
 */
static bool
clamp_timeout (int32_t *timeout_msec, bool *clamped)
{
   int64_t left_ms;

   *clamped = false;
   if (!thread_deadline_ns) {
      return true;
   }
   left_ms = thread_deadline_ns - fw_mono_ns ();
   if (left_ms <= 0) {
      thread_hit = true;
      return false;
   }
   left_ms = (left_ms + 999999) / 1000000;
   if (*timeout_msec < 0 || left_ms <= *timeout_msec) {
      *timeout_msec = (int32_t) (left_ms > INT32_MAX ? INT32_MAX : left_ms);
      *clamped = true;
   }
   return true;
}

/* After a clamped read or write: a timeout then is the deadline's. */
static void
note_timeout (deadline_stream_t *ds, ssize_t r, bool clamped)
{
   if (r < 0 && clamped && mongoc_stream_timed_out (ds->base)) {
      thread_hit = true;
   }
}

static void
ds_destroy (mongoc_stream_t *stream)
{
   deadline_stream_t *ds = (deadline_stream_t *) stream;
   mongoc_stream_destroy (ds->base);
   bson_free (ds);
}

static void
ds_failed (mongoc_stream_t *stream)
{
   deadline_stream_t *ds = (deadline_stream_t *) stream;
   mongoc_stream_failed (ds->base);
   bson_free (ds);
}

static int
ds_close (mongoc_stream_t *stream)
{
   return mongoc_stream_close (((deadline_stream_t *) stream)->base);
}

static int
ds_flush (mongoc_stream_t *stream)
{
   return mongoc_stream_flush (((deadline_stream_t *) stream)->base);
}

static ssize_t
ds_writev (mongoc_stream_t *stream, mongoc_iovec_t *iov, size_t iovcnt, int32_t timeout_msec)
{
   deadline_stream_t *ds = (deadline_stream_t *) stream;
   bool clamped;
   ssize_t r;

   ds->timed_out = !clamp_timeout (&timeout_msec, &clamped);
   if (ds->timed_out) {
      errno = ETIMEDOUT;
      return -1;
   }
   r = mongoc_stream_writev (ds->base, iov, iovcnt, timeout_msec);
   note_timeout (ds, r, clamped);
   return r;
}

static ssize_t
ds_readv (mongoc_stream_t *stream, mongoc_iovec_t *iov, size_t iovcnt, size_t min_bytes,
          int32_t timeout_msec)
{
   deadline_stream_t *ds = (deadline_stream_t *) stream;
   bool clamped;
   ssize_t r;

   ds->timed_out = !clamp_timeout (&timeout_msec, &clamped);
   if (ds->timed_out) {
      errno = ETIMEDOUT;
      return -1;
   }
   r = mongoc_stream_readv (ds->base, iov, iovcnt, min_bytes, timeout_msec);
   /* A short read is how a socket stream reports a timeout, too. */
   note_timeout (ds, r < (ssize_t) min_bytes ? -1 : r, clamped);
   return r;
}

static int
ds_setsockopt (mongoc_stream_t *stream, int level, int optname, void *optval,
               mongoc_socklen_t optlen)
{
   return mongoc_stream_setsockopt (((deadline_stream_t *) stream)->base, level, optname, optval,
                                    optlen);
}

static mongoc_stream_t *
ds_get_base_stream (mongoc_stream_t *stream)
{
   return ((deadline_stream_t *) stream)->base;
}

static bool
ds_check_closed (mongoc_stream_t *stream)
{
   return mongoc_stream_check_closed (((deadline_stream_t *) stream)->base);
}

/* libmongoc's mongoc_stream_poll polls the root streams itself; this is for
 * callers that use the method directly. */
static ssize_t
ds_poll (mongoc_stream_poll_t *streams, size_t nstreams, int32_t timeout)
{
   mongoc_stream_poll_t *mapped;
   ssize_t r;
   size_t i;

   mapped = bson_malloc0 (sizeof *mapped * (nstreams ? nstreams : 1));
   for (i = 0; i < nstreams; i++) {
      mapped[i].stream = streams[i].stream->type == DEADLINE_STREAM_TYPE
                            ? ((deadline_stream_t *) streams[i].stream)->base
                            : streams[i].stream;
      mapped[i].events = streams[i].events;
   }
   r = mongoc_stream_poll (mapped, nstreams, timeout);
   for (i = 0; i < nstreams; i++) {
      streams[i].revents = mapped[i].revents;
   }
   bson_free (mapped);
   return r;
}

static bool
ds_timed_out (mongoc_stream_t *stream)
{
   deadline_stream_t *ds = (deadline_stream_t *) stream;
   return ds->timed_out || mongoc_stream_timed_out (ds->base);
}

static bool
ds_should_retry (mongoc_stream_t *stream)
{
   deadline_stream_t *ds = (deadline_stream_t *) stream;
   return ds->base->should_retry && ds->base->should_retry (ds->base);
}

static mongoc_stream_t *
deadline_initiator (const mongoc_uri_t *uri, const mongoc_host_list_t *host, void *user_data,
                    bson_error_t *error)
{
   mongoc_stream_t *base;
   deadline_stream_t *ds;

   if (fw_io_deadline_passed ()) {
      thread_hit = true;
      bson_set_error (error, MONGOC_ERROR_STREAM, MONGOC_ERROR_STREAM_CONNECT,
                      "not connecting to %s: the operation's deadline has passed",
                      host->host_and_port);
      return NULL;
   }
   base = mongoc_client_default_stream_initiator (uri, host, user_data, error);
   if (!base) {
      return NULL;
   }
   ds = bson_malloc0 (sizeof *ds);
   ds->base = base;
   ds->vtable.type = DEADLINE_STREAM_TYPE;
   ds->vtable.destroy = ds_destroy;
   ds->vtable.failed = ds_failed;
   ds->vtable.close = ds_close;
   ds->vtable.flush = ds_flush;
   ds->vtable.writev = ds_writev;
   ds->vtable.readv = ds_readv;
   ds->vtable.setsockopt = ds_setsockopt;
   ds->vtable.get_base_stream = ds_get_base_stream;
   ds->vtable.check_closed = ds_check_closed;
   ds->vtable.poll = ds_poll;
   ds->vtable.timed_out = ds_timed_out;
   ds->vtable.should_retry = ds_should_retry;
   return &ds->vtable;
}

bool
fw_io_deadline_install (mongoc_client_t *client, fw_error_t *error)
{
   if (!client) {
      fw_error_set (error, FW_ERROR_INVALID, "fw_io_deadline_install: client is NULL");
      return false;
   }
   /* The default initiator takes the client for its TLS options. */
   mongoc_client_set_stream_initiator (client, deadline_initiator, client);
   return true;
}
