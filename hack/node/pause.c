/* The real node's pause image: the process that holds a pod sandbox's namespaces.
 * No registry is reachable here, so containerd's CRI sandbox_image is made from this file
 * (gcc -static, by hack/node/node.sh build). It reaps children, since it is PID 1 of pods that
 * share their process namespace, and exits on SIGTERM or SIGINT. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { (void)sig; _exit(0); }

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction stop = {0}, child = {0};
    stop.sa_handler = on_stop;
    child.sa_handler = on_child;
    child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGTERM, &stop, 0);
    sigaction(SIGINT, &stop, 0);
    sigaction(SIGCHLD, &child, 0);
    for (;;) pause();
}
