/* RDMASHIM_PROVIDER picks the provider where the device list is built: unset, "auto" (with no
 * RDMA hardware, as here) and "soft" give the soft device; "native" whose library cannot be
 * loaded (RDMASHIM_NATIVE_LIBDIR names a directory without one) and any unknown value give an
 * empty device list (ibv_get_device_list and rdma_get_devices) and one line on stderr, printed
 * once however often the list is asked for: never a silent fallback to the soft device.
 * (Passthrough to a library that loads is tests/tools/passthrough.py.)
 *
 * Each case runs in a forked child (the choice is read once per process) whose stderr goes to a
 * pipe the parent reads. Exit 0 passes. */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the child: the number of devices ibv_get_device_list and rdma_get_devices report, asked
 * twice each; exit status 10 + that number, or 1 if the answers disagree. */
static int child(void) {
  int first = -1;
  for (int round = 0; round < 2; round++) {
    int n = -1;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || l[n] != NULL)
      return 1;
    ibv_free_device_list(l);
    int m = -1;
    struct ibv_context **c = rdma_get_devices(&m);
    if (!c || m != n || c[m] != NULL)
      return 2;
    rdma_free_devices(c);
    if (first >= 0 && n != first)
      return 3;
    first = n;
  }
  return 10 + first;
}

static int failures;

static void run(const char *value, int want_devices, int want_lines) {
  int p[2];
  if (pipe(p) != 0) {
    perror("pipe");
    exit(1);
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(1);
  }
  if (pid == 0) {
    alarm(20);
    close(p[0]);
    dup2(p[1], 2);
    setenv("RDMASHIM_NATIVE_LIBDIR", "/nonexistent/rdmashim-test", 1);
    if (value)
      setenv("RDMASHIM_PROVIDER", value, 1);
    else
      unsetenv("RDMASHIM_PROVIDER");
    _exit(child());
  }
  close(p[1]);
  char buf[4096];
  size_t len = 0;
  ssize_t r;
  while (len < sizeof buf - 1 && (r = read(p[0], buf + len, sizeof buf - 1 - len)) > 0)
    len += (size_t)r;
  buf[len] = 0;
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  int lines = 0;
  for (char *s = buf; (s = strstr(s, "RDMASHIM_PROVIDER")) != NULL; s++)
    lines++;
  int devices = WIFEXITED(status) ? WEXITSTATUS(status) - 10 : -100;
  const char *name = value ? value : "(unset)";
  if (devices != want_devices || lines != want_lines) {
    printf("FAIL RDMASHIM_PROVIDER=%s: %d devices (want %d), %d stderr lines naming it (want %d)"
           "; stderr: %s\n",
           name, devices, want_devices, lines, want_lines, buf);
    failures++;
  } else {
    printf("ok   RDMASHIM_PROVIDER=%s: %d devices, %d stderr lines\n", name, devices, lines);
  }
}

int main(void) {
  run(NULL, 1, 0);
  run("soft", 1, 0);
  run("auto", 1, 0);
  run("native", 0, 1);
  run("no-such-provider", 0, 1);
  return failures ? 1 : 0;
}
