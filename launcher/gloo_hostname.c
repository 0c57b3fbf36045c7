/* Preloaded into Horovod's ranks on a host whose name resolves to loopback (Debian's and Ubuntu's "127.0.1.1 NAME"
   in /etc/hosts): gethostname() returns LSTM_GLOO_HOSTNAME, the host's routable address, instead of its name.
   Horovod 0.28 creates each process set's Gloo device without an interface (gloo_context.cc,
   InitializeForProcessSet), so Gloo binds to what the host name resolves to (tcp/device.cc, CreateDevice), and
   the other hosts cannot connect to 127.0.1.1. make setup builds it into .venv; the launcher preloads it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int gethostname(char *name, size_t len) {
    const char *address = getenv("LSTM_GLOO_HOSTNAME");
    if (address == NULL) {
        int (*own)(char *, size_t) = (int (*)(char *, size_t))dlsym(RTLD_NEXT, "gethostname");
        return own(name, len);
    }
    if (strlen(address) >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(name, address);
    return 0;
}
