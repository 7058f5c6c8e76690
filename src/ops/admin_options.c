/*
 * admin_options.c - what the admin endpoint is started with: its address
 * (parsed and checked: an open one needs a token), the token's form, and
 * the token file of `run --admin-token-file`.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "admin-private.h"
#include "flowwarden/log.h"

bool
fw_admin_parse_listen (const char *listen, const char *what, address_t *out, fw_error_t *error)
{
   char host[128];
   const char *port_text, *colon;
   char *end;
   long port;
   struct sockaddr_in *v4 = (struct sockaddr_in *) &out->ss;
   struct sockaddr_in6 *v6 = (struct sockaddr_in6 *) &out->ss;

   memset (out, 0, sizeof *out);
   if (!listen || !*listen) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "%s: expected an address and port such as \"127.0.0.1:9464\", got nothing",
                    what);
      return false;
   }
   if (listen[0] == '[') {
      const char *close = strchr (listen, ']');
      if (!close || close[1] != ':' || (size_t) (close - listen - 1) >= sizeof host) {
         goto bad;
      }
      memcpy (host, listen + 1, (size_t) (close - listen - 1));
      host[close - listen - 1] = '\0';
      port_text = close + 2;
   } else {
      if (!(colon = strrchr (listen, ':')) || (size_t) (colon - listen) >= sizeof host) {
         goto bad;
      }
      if (memchr (listen, ':', (size_t) (colon - listen))) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "%s: \"%s\": write an IPv6 address in brackets, e.g. \"[::1]:9464\"", what,
                       listen);
         return false;
      }
      memcpy (host, listen, (size_t) (colon - listen));
      host[colon - listen] = '\0';
      port_text = colon + 1;
   }
   port = strtol (port_text, &end, 10);
   if (!*port_text || *end || port < 0 || port > 65535 || port_text[0] == '-' ||
       port_text[0] == '+') {
      fw_error_set (error, FW_ERROR_INVALID,
                    "%s: \"%s\": the port must be a number from 0 to 65535", what, listen);
      return false;
   }
   if (!*host) {
      snprintf (host, sizeof host, "0.0.0.0");
   } else if (strcmp (host, "localhost") == 0) {
      snprintf (host, sizeof host, "127.0.0.1");
   }
   if (inet_pton (AF_INET, host, &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons ((uint16_t) port);
      out->loopback = (ntohl (v4->sin_addr.s_addr) >> 24) == 127;
      return true;
   }
   if (inet_pton (AF_INET6, host, &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons ((uint16_t) port);
      out->v6 = true;
      out->loopback = IN6_IS_ADDR_LOOPBACK (&v6->sin6_addr) ||
                      (IN6_IS_ADDR_V4MAPPED (&v6->sin6_addr) && v6->sin6_addr.s6_addr[12] == 127);
      return true;
   }
   fw_error_set (error, FW_ERROR_INVALID,
                 "%s: \"%s\": \"%s\" is not an IP address (use e.g. \"127.0.0.1:9464\", "
                 "\"[::1]:9464\" or \"localhost:9464\")",
                 what, listen, host);
   return false;

bad:
   fw_error_set (error, FW_ERROR_INVALID,
                 "%s: expected an address and port such as \"127.0.0.1:9464\", got \"%s\"", what,
                 listen);
   return false;
}

static bool
check_token (const char *token, const char *what, fw_error_t *error)
{
   for (const char *p = token; p && *p; p++) {
      if (*p <= ' ' || *p > '~') {
         fw_error_set (error, FW_ERROR_INVALID,
                       "%s: the admin token must be printable ASCII without spaces", what);
         return false;
      }
   }
   return true;
}

#define TOKEN_FILE_MAX 4096

bool
fw_admin_read_token_file (const char *path, char **token, fw_error_t *error)
{
   char buf[TOKEN_FILE_MAX + 2];
   struct stat st;
   size_t n;
   FILE *f;

   *token = NULL;
   if (!(f = fopen (path, "r"))) {
      fw_error_set (error, FW_ERROR_IO, "--admin-token-file: cannot read %s: %s", path,
                    strerror (errno));
      return false;
   }
   n = fread (buf, 1, sizeof buf - 1, f);
   buf[n] = '\0';
   if (fstat (fileno (f), &st) == 0 && (st.st_mode & (S_IROTH | S_IWOTH))) {
      fw_log (FW_LOG_WARN, NULL,
              "--admin-token-file: %s can be read by every user of this machine: "
              "chmod 600 it (anyone who reads the token can pause streams and replay dead "
              "letters)",
              path);
   }
   fclose (f);
   if (n > TOKEN_FILE_MAX) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "--admin-token-file: %s is over %d bytes: it "
                    "should hold the token alone",
                    path, TOKEN_FILE_MAX);
      return false;
   }
   if (n && buf[n - 1] == '\n') {
      buf[--n] = '\0';
      if (n && buf[n - 1] == '\r') {
         buf[--n] = '\0';
      }
   }
   if (n == 0) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "--admin-token-file: %s is empty: write the token "
                    "in it (e.g. head -c 32 /dev/urandom | base64 > %s)",
                    path, path);
      return false;
   }
   if (strlen (buf) != n || strchr (buf, '\n')) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "--admin-token-file: %s: the token must be one line "
                    "of printable ASCII without spaces",
                    path);
      return false;
   }
   if (!check_token (buf, "--admin-token-file", error)) {
      return false;
   }
   if (!(*token = strdup (buf))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return false;
   }
   return true;
}

bool
fw_admin_check_options (const char *listen, const char *token, const char *what, fw_error_t *error)
{
   address_t addr;

   if (!fw_admin_parse_listen (listen, what, &addr, error) || !check_token (token, what, error)) {
      return false;
   }
   if (!addr.loopback && (!token || !*token)) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "%s: refusing to serve the admin endpoint on %s without a token: anyone who "
                    "can reach that address could pause streams and reload the script. Set a "
                    "token (fw.defaults { admin = { token = fw.env(\"FW_ADMIN_TOKEN\") } }) or "
                    "listen on a loopback address such as 127.0.0.1",
                    what, listen);
      return false;
   }
   return true;
}
