/* The process that holds a pod sandbox on the local node (hack/localnode.py): it waits for a
 * signal, reaps orphaned children, and exits on SIGINT or SIGTERM. Built statically by
 * hack/tools.sh and imported into containerd as the sandbox image; never pulled. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void leave(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
  signal(SIGINT, leave);
  signal(SIGTERM, leave);
  signal(SIGCHLD, reap);
  for (;;) pause();
}
