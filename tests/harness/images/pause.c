/*
 * pause: the sandbox ("infra") process of a pod, written for nodeagent's test images.
 *
 * It holds the pod's namespaces open and does nothing else:
 *   - SIGINT or SIGTERM: exit 0 at once (so sandbox stop is quick);
 *   - SIGCHLD: reap every exited child (it is PID 1 of a shared PID namespace);
 *   - otherwise sleep in pause() forever.
 * Built with `gcc -static` so the image needs no libc.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signo) {
    (void)signo;
    _exit(0);
}

static void on_child(int signo) {
    (void)signo;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int install(int signo, void (*handler)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    return sigaction(signo, &sa, NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("pause (nodeagent test image)");
        return 0;
    }
    if (getpid() != 1) {
        fputs("pause: warning: not running as PID 1\n", stderr);
    }
    if (install(SIGINT, on_stop, 0) < 0 || install(SIGTERM, on_stop, 0) < 0 ||
        install(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;) {
        pause();
    }
    fputs("pause: error: infinite loop terminated\n", stderr);
    return 42;
}
