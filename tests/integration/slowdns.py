"""A resolver that does not answer, for the tests of fw.pg's and fw.redis's
bounded host-name lookups: an LD_PRELOAD library whose getaddrinfo hangs
30 s for names ending in ".slow.test" (others go to the real one)."""
import os
import shutil
import subprocess

SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <string.h>
#include <unistd.h>
typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res) {
  gai_fn real = (gai_fn) dlsym(RTLD_NEXT, "getaddrinfo");
  size_t n = node ? strlen(node) : 0;
  if (n > 10 && strcmp(node + n - 10, ".slow.test") == 0) {
    sleep(30);
    return EAI_AGAIN;
  }
  return real(node, service, hints, res);
}
"""


def slow_dns_library(folder):
    """Builds the library in folder; None where it cannot be used: no C
    compiler, or the sanitized build (ASan must come first in the process)."""
    if os.environ.get("FW_SANITIZED") == "1" or not shutil.which("cc"):
        return None
    src, lib = os.path.join(folder, "slowdns.c"), os.path.join(folder, "slowdns.so")
    with open(src, "w") as f:
        f.write(SOURCE)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src, "-ldl"], check=True)
    return lib
