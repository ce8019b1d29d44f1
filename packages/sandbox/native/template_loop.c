// The template's loop between runs, and each run child's preparation up to its request, in C
// (python/torl_sandbox/template.py has the protocol with the server; run_child.py the same steps
// in Python, used where this file cannot be built).
//
// Why not Python: the template forks each run child from the warm heap. Every page either process
// writes while both live is copied (2 MiB for a page of the huge-page heap), and every page the
// template writes after a fork takes a write-protect fault even once the child is gone. Python
// writes dozens of pages for a few lines (reference counts, frames, the objects it allocates);
// this code writes its own stack and a few static variables. The run child comes back to Python
// isolated, limited and dropped to the run uid, and reads its request from there (C again).
//
// Built by @torl-ts/sandbox with the machine's C compiler, loaded into the fork server through a
// memfd (no host path in any run's /proc/self/maps), and called once by the template:
// torl_template_loop returns 0 in each new run child, prepared (its request then comes from
// torl_child_request), 1 in the template when the server closes the socket. A failed call in the
// template is written to fd 2 and ends it (70); one in a run child ends that child (1) before any
// of the run's code exists.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

// Bumped whenever struct torl_native_config changes: the Python side refuses another number.
#define TORL_NATIVE_ABI 2

struct torl_range {
  uintptr_t addr;
  size_t len;
};

struct torl_native_config {
  int abi;
  // the template
  int sock;         // SOCK_SEQPACKET to the server: one command byte in, one JSON answer out
  int pid_ns;       // runs live in our pid namespace: kill(-1) reaches exactly what they left
  int child_ends;   // the run child's pipe ends: ctrl_r, out_w, err_w, status_w from here on
  int trace;        // per-step timings (profiling)
  const char *scratch;
  int n_parent_fds;  // the template's own descriptors, closed first in each run child
  const int *parent_fds;
  int ipc_on;         // empty the runs' IPC namespace before each fork
  int ipc_tables[3];  // /proc/sysvipc/{shm,msg,sem}, opened in the runs' IPC namespace
  int mqueue_dir;     // the runs' mqueue filesystem, as a directory fd
  int urandom;        // /dev/urandom, read into the generators' state arrays before each fork
  int n_iov;
  const struct iovec *iov;
  // each run child, before its request
  int n_procs_fds;  // cgroup.procs files the child moves itself into
  const int *procs_fds;
  int populate_hot_whole;  // huge-page heap: the small hot pages always, the huge ones while idle
  int n_hot;
  const struct torl_range *hot;
  int n_hot_huge;
  const struct torl_range *hot_huge;
  size_t small_chunk;  // ordinary heap: the hot pages while idle, this many bytes between looks
  long fsize_limit;    // RLIMIT_FSIZE, bytes
  int drop_uid;
  int uid;
  int gid;
};

enum { IPC_KIND_SHM = 0, IPC_KIND_MSG = 1, IPC_KIND_SEM = 2 };
enum { CTRL = 0, OUT = 1, ERR = 2, STATUS = 3 };
#define HUGE_BYTES ((size_t)2 << 20)

static const struct torl_native_config *cfg;
static pid_t child = -1;
static char answer[1024];
// the run child's timings (JSON members, with trace on)
static char timings[2048];
static size_t timings_len = 0;

static void die(const char *what) {
  char line[256];
  int n = snprintf(line, sizeof line, "template loop: %s: %s\n", what, strerror(errno));
  if (n > 0) (void)!write(2, line, (size_t)n);
  _exit(70);
}

static double now_us(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

static void add_timing(const char *fmt, const char *name, double value) {
  if (timings_len >= sizeof timings) return;
  int n = snprintf(timings + timings_len, sizeof timings - timings_len, fmt, timings_len ? ", " : "", name, value);
  if (n > 0) timings_len += (size_t)n;
}

// ---------------------------------------------------------------- the run child, before its request

static struct {
  double wall, cpu;
  long faults;
} mark_at;

// Per-step timings as run_child.step_timer has them: step_<name>_us, _cpu_us, _faults.
static void mark(const char *name) {
  if (!cfg->trace) return;
  double wall = now_us(CLOCK_MONOTONIC), cpu = now_us(CLOCK_PROCESS_CPUTIME_ID);
  long faults = minor_faults();
  char key[64];
  snprintf(key, sizeof key, "step_%s_us", name);
  add_timing("%s\"%s\": %.1f", key, wall - mark_at.wall);
  snprintf(key, sizeof key, "step_%s_cpu_us", name);
  add_timing("%s\"%s\": %.1f", key, cpu - mark_at.cpu);
  snprintf(key, sizeof key, "step_%s_faults", name);
  add_timing("%s\"%s\": %.0f", key, (double)(faults - mark_at.faults));
  mark_at.wall = now_us(CLOCK_MONOTONIC);
  mark_at.cpu = now_us(CLOCK_PROCESS_CPUTIME_ID);
  mark_at.faults = minor_faults();
}

static void child_fails(const char *what) {
  char line[256];
  int n = snprintf(line, sizeof line, "sandbox: preparing the run: %s: %s\n", what, strerror(errno));
  if (n > 0) (void)!write(2, line, (size_t)n);
  _exit(1);
}

// Copies the ranges into this process until the request arrives, `chunk` bytes at a time
// (prefault.populate_while_idle); how many ranges it copied whole.
static int populate_while_idle(const struct torl_range *ranges, int n, size_t chunk, int request_fd) {
  struct pollfd waiting = {request_fd, POLLIN, 0};
  int done = 0;
  for (int i = 0; i < n; i++) {
    for (size_t at = 0; at < ranges[i].len; at += chunk) {
      if (poll(&waiting, 1, 0) > 0) return done;
      size_t len = ranges[i].len - at < chunk ? ranges[i].len - at : chunk;
      madvise((void *)(ranges[i].addr + at), len, MADV_POPULATE_WRITE);
    }
    done++;
  }
  return done;
}

static int read_full(int fd, char *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, buf + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return got == 0 && n == 0 ? 0 : -1;
    got += (size_t)n;
  }
  return 1;
}

// zygote_main's steps up to the request, in the same order: session, cgroups, hot pages, the
// pipes on fds 1-4 and nothing else open, working directory, fixed limits, the run uid. What does
// not differ between runs the template did once (run_child.prepare_template).
static void prepare_child(void) {
  static char name[16] = "sandbox-run";
  timings_len = 0;
  double cpu_start = now_us(CLOCK_PROCESS_CPUTIME_ID);
  prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
  if (cfg->trace) {
    mark_at.wall = now_us(CLOCK_MONOTONIC);
    mark_at.cpu = now_us(CLOCK_PROCESS_CPUTIME_ID);
    mark_at.faults = minor_faults();
    add_timing("%s\"%s\": %.3f", "zygote_cpu_at_start_ms", cpu_start / 1e3);
  }
  if (setsid() < 0) child_fails("setsid");
  mark("setsid");
  for (int i = 0; i < cfg->n_procs_fds; i++)
    if (pwrite(cfg->procs_fds[i], "0", 1, 0) != 1) child_fails("joining the run's cgroups");
  mark("cgroup_join");
  int ctrl = cfg->child_ends + CTRL;
  double populate_start = now_us(CLOCK_MONOTONIC);
  int populated;
  if (cfg->populate_hot_whole) {
    for (int i = 0; i < cfg->n_hot; i++) madvise((void *)cfg->hot[i].addr, cfg->hot[i].len, MADV_POPULATE_WRITE);
    populated = populate_while_idle(cfg->hot_huge, cfg->n_hot_huge, HUGE_BYTES, ctrl);
  } else {
    populated = populate_while_idle(cfg->hot, cfg->n_hot, cfg->small_chunk, ctrl);
  }
  if (cfg->trace) {
    add_timing("%s\"%s\": %.0f", "zygote_populated_ranges", populated);
    add_timing("%s\"%s\": %.3f", "zygote_populate_ms", (now_us(CLOCK_MONOTONIC) - populate_start) / 1e3);
  }
  mark("prefault");
  // the request's pipe on 4, output on 1 and 2, the status pipe on 3 (all ends sit at child_ends >= 5)
  static const int targets[4] = {4, 1, 2, 3};
  for (int i = 0; i < 4; i++)
    if (dup2(cfg->child_ends + i, targets[i]) < 0) child_fails("dup2");
  if (syscall(SYS_close_range, 5, ~0U, 0) != 0) {
    if (errno != ENOSYS) child_fails("close_range");
    for (int fd = 5; fd < 65536; fd++) close(fd);
  }
  if (chdir(cfg->scratch) != 0) child_fails("chdir to the working directory");
  mark("fds_chdir");
  struct rlimit core = {0, 0}, nofile = {256, 256};
  struct rlimit fsize = {(rlim_t)cfg->fsize_limit, (rlim_t)cfg->fsize_limit};
  if (setrlimit(RLIMIT_CORE, &core) || setrlimit(RLIMIT_NOFILE, &nofile) || setrlimit(RLIMIT_FSIZE, &fsize))
    child_fails("setrlimit");
  mark("rlimits");
  // the template did these once for every child (run_child.prepare_template); marked all the same,
  // so that the steps' timings read as the Python loop's do
  mark("reseed");
  mark("ipc_namespace");
  if (cfg->drop_uid) {
    mark("capability_drop");
    if (setgroups(0, NULL) != 0) child_fails("setgroups");
    if (setresgid((gid_t)cfg->gid, (gid_t)cfg->gid, (gid_t)cfg->gid) != 0) child_fails("setresgid");
    if (setresuid((uid_t)cfg->uid, (uid_t)cfg->uid, (uid_t)cfg->uid) != 0) child_fails("setresuid");
  }
  mark("uid_drop");
  mark("seccomp");
  mark("signals_env_stdio");
  if (cfg->trace) add_timing("%s\"%s\": %.3f", "zygote_cpu_ready_ms", now_us(CLOCK_PROCESS_CPUTIME_ID) / 1e3);
}

// The run child's request, read once Python is back in the child: the first Python steps after a
// fork copy pages (returning from the loop, the interpreter's state), and they cost less before the
// request arrives than after. A 4-byte big-endian length, then its JSON (framing.read_frame); none:
// the server is closing, and this child ends without a run.
const char *torl_child_request(size_t *len) {
  static char *request = NULL;
  static size_t request_len = 0;
  unsigned char head[4];
  int got = read_full(4, (char *)head, 4);
  if (got == 0) _exit(0);
  if (got < 0) child_fails("reading the request's length");
  request_len = (size_t)head[0] << 24 | (size_t)head[1] << 16 | (size_t)head[2] << 8 | head[3];
  request = malloc(request_len + 1);
  if (request == NULL) child_fails("room for the request");
  if (request_len > 0 && read_full(4, request, request_len) != 1) child_fails("reading the request");
  request[request_len] = 0;
  close(4);
  *len = request_len;
  return request;
}

// The child's timings as the members of a JSON object (empty without trace).
const char *torl_child_timings(void) {
  timings[timings_len < sizeof timings ? timings_len : sizeof timings - 1] = 0;
  return timings;
}

// ---------------------------------------------------------------- the template

struct ended {
  int have_status;
  int status;
  double cpu_ms;
  long faults;
};

static void note_reaped(pid_t pid, int status, const struct rusage *ru, struct ended *out) {
  if (pid != child) return;
  out->have_status = 1;
  out->status = status;
  out->cpu_ms = (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1e3 +
                (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1e3;
  out->faults = ru->ru_minflt;
}

static void reap_all(int block, struct ended *out) {
  for (;;) {
    int status;
    struct rusage ru;
    pid_t pid = wait4(-1, &status, block ? 0 : WNOHANG, &ru);
    if (pid < 0) {
      if (errno == EINTR) continue;
      if (errno == ECHILD) return;
      die("wait4");
    }
    if (pid == 0) return;
    note_reaped(pid, status, &ru, out);
  }
}

// SIGKILLs every process the run left and reaps them (template.end_runs).
static void end_runs(struct ended *out) {
  memset(out, 0, sizeof *out);
  if (cfg->pid_ns) {
    // kill(-1) from a process that is not pid 1 reaches every process of the namespace but pid 1
    // (the server) and the caller; it fails (ESRCH) once none is left
    for (int i = 0; i < 100000; i++) {
      if (kill(-1, SIGKILL) != 0) break;
      reap_all(0, out);
      if (i > 20) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
      }
    }
    reap_all(1, out);
  } else if (child > 0) {
    killpg(child, SIGKILL);
    int status;
    struct rusage ru;
    pid_t pid;
    do pid = wait4(child, &status, 0, &ru);
    while (pid < 0 && errno == EINTR);
    if (pid == child) note_reaped(pid, status, &ru, out);
    reap_all(0, out);
  }
  child = -1;
}

// Every System V object of one table, removed: the table lists one per line after a header, its
// id in the second column.
static void remove_table(int fd, int kind) {
  static char buf[1 << 16];
  char line[512];
  size_t used = 0;
  int header = 1;
  off_t offset = 0;
  for (;;) {
    ssize_t n = pread(fd, buf, sizeof buf, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("read /proc/sysvipc");
    if (n == 0) break;
    offset += n;
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] != '\n') {
        if (used < sizeof line - 1) line[used++] = buf[i];
        continue;
      }
      line[used] = 0;
      used = 0;
      if (header) {
        header = 0;
        continue;
      }
      long key, id;
      if (sscanf(line, "%ld %ld", &key, &id) != 2) continue;
      int ret = kind == IPC_KIND_SHM   ? shmctl((int)id, IPC_RMID, NULL)
                : kind == IPC_KIND_MSG ? msgctl((int)id, IPC_RMID, NULL)
                                       : semctl((int)id, 0, IPC_RMID);
      if (ret != 0) die(kind == IPC_KIND_SHM ? "shmctl IPC_RMID" : kind == IPC_KIND_MSG ? "msgctl IPC_RMID" : "semctl IPC_RMID");
    }
  }
}

struct dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Empties the runs' IPC namespace (isolation.RunIpc.clear): three reads of a header and one empty
// listing when the run made nothing, as most do.
static void clear_ipc(void) {
  for (int k = 0; k < 3; k++) {
    char head[4096];
    ssize_t n = pread(cfg->ipc_tables[k], head, sizeof head, 0);
    if (n < 0) die("read /proc/sysvipc");
    int lines = 0;
    for (ssize_t i = 0; i < n; i++) lines += head[i] == '\n';
    if (lines > 1) remove_table(cfg->ipc_tables[k], k);
  }
  static char dents[8192];
  for (;;) {
    int removed = 0;
    if (lseek(cfg->mqueue_dir, 0, SEEK_SET) < 0) die("rewind the mqueue listing");
    for (;;) {
      long n = syscall(SYS_getdents64, cfg->mqueue_dir, dents, sizeof dents);
      if (n < 0) die("list the mqueue filesystem");
      if (n == 0) break;
      for (long at = 0; at < n;) {
        struct dirent64 *d = (struct dirent64 *)(dents + at);
        at += d->d_reclen;
        if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0) continue;
        if (unlinkat(cfg->mqueue_dir, d->d_name, 0) != 0) die("unlink a POSIX message queue");
        removed++;
      }
    }
    if (removed == 0) break;
  }
}

static void reseed(void) {
  if (cfg->n_iov == 0) return;
  size_t want = 0;
  for (int i = 0; i < cfg->n_iov; i++) want += cfg->iov[i].iov_len;
  ssize_t got = readv(cfg->urandom, cfg->iov, cfg->n_iov);
  if (got < 0 || (size_t)got != want) die("short read from /dev/urandom while reseeding the random generators");
}

static size_t say_ended(const struct ended *e) {
  if (!e->have_status)
    return (size_t)snprintf(answer, sizeof answer, "{\"status\": null, \"cpu_ms\": %.3f, \"faults\": %ld", e->cpu_ms,
                            e->faults);
  return (size_t)snprintf(answer, sizeof answer, "{\"status\": %d, \"cpu_ms\": %.3f, \"faults\": %ld", e->status,
                          e->cpu_ms, e->faults);
}

static void send_answer(size_t n, const int *fds, int n_fds) {
  struct iovec iov = {answer, n};
  union {
    char buf[CMSG_SPACE(4 * sizeof(int))];
    struct cmsghdr align;
  } control;
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (n_fds > 0) {
    memset(&control, 0, sizeof control);
    msg.msg_control = control.buf;
    msg.msg_controllen = CMSG_SPACE((size_t)n_fds * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)n_fds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)n_fds * sizeof(int));
  }
  while (sendmsg(cfg->sock, &msg, 0) < 0)
    if (errno != EINTR) die("send to the server");
}

int torl_native_abi(void) { return TORL_NATIVE_ABI; }

// The template's loop (template.template_main): "E" ends the run and answers how it ended; "N"
// ends it, empties the IPC namespace, reseeds, answers with the next child's pipe ends, and forks
// that child. Returns 0 in the child, prepared up to its request; 1 at end of input.
int torl_template_loop(const struct torl_native_config *config) {
  cfg = config;
  if (cfg->abi != TORL_NATIVE_ABI) {
    errno = EINVAL;
    die("a configuration of another version");
  }
  double last_fork_us = -1, last_fork_cpu_us = 0;
  long last_fork_faults = 0;
  for (;;) {
    char command[16];
    ssize_t got;
    do got = recv(cfg->sock, command, sizeof command, 0);
    while (got < 0 && errno == EINTR);
    if (got < 0) die("receive from the server");
    if (got == 0) return 1;
    double t0 = now_us(CLOCK_MONOTONIC), c0 = now_us(CLOCK_THREAD_CPUTIME_ID);
    struct ended e;
    end_runs(&e);
    size_t n = say_ended(&e);
    if (command[0] != 'N') {
      n += (size_t)snprintf(answer + n, sizeof answer - n, "}");
      send_answer(n, NULL, 0);
      continue;
    }
    if (cfg->ipc_on) clear_ipc();
    double t1 = now_us(CLOCK_MONOTONIC), c1 = now_us(CLOCK_THREAD_CPUTIME_ID);
    reseed();
    double t2 = now_us(CLOCK_MONOTONIC), c2 = now_us(CLOCK_THREAD_CPUTIME_ID);
    if (cfg->trace) {
      n += (size_t)snprintf(answer + n, sizeof answer - n,
                            ", \"kill_reap_us\": %.1f, \"kill_reap_cpu_us\": %.1f, \"reseed_us\": %.1f, "
                            "\"reseed_cpu_us\": %.1f",
                            t1 - t0, c1 - c0, t2 - t1, c2 - c1);
      if (last_fork_us >= 0)
        n += (size_t)snprintf(answer + n, sizeof answer - n,
                              ", \"fork_us\": %.1f, \"fork_cpu_us\": %.1f, \"fork_faults\": %ld", last_fork_us,
                              last_fork_cpu_us, last_fork_faults);
    }
    // the run's working directory, on the fresh /tmp the server has just mounted
    if (mkdir(cfg->scratch, 0700) != 0 && errno != EEXIST) die("mkdir the run's working directory");
    if (cfg->drop_uid && chown(cfg->scratch, (uid_t)cfg->uid, (gid_t)cfg->gid) != 0)
      die("chown the run's working directory");
    int theirs[4], ours[4], p[2];
    for (int i = 0; i < 4; i++) {
      if (pipe2(p, O_CLOEXEC) != 0) die("pipe2");
      // the child reads its request (CTRL) and writes the others
      theirs[i] = i == CTRL ? p[0] : p[1];
      ours[i] = i == CTRL ? p[1] : p[0];
    }
    for (int i = 0; i < 4; i++) {
      if (dup3(theirs[i], cfg->child_ends + i, O_CLOEXEC) < 0) die("dup3");
      close(theirs[i]);
    }
    n += (size_t)snprintf(answer + n, sizeof answer - n, ", \"cycle_ms\": %.4f}", (now_us(CLOCK_MONOTONIC) - t1) / 1e3);
    send_answer(n, ours, 4);
    for (int i = 0; i < 4; i++) close(ours[i]);
    double tf = now_us(CLOCK_MONOTONIC), cf = now_us(CLOCK_THREAD_CPUTIME_ID);
    long ff = cfg->trace ? minor_faults() : 0;
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      // the server's first word from the child: its pid (one write, shorter than PIPE_BUF)
      char said[24];
      int len = snprintf(said, sizeof said, "%d\n", (int)getpid());
      if (write(cfg->child_ends + STATUS, said, (size_t)len) != len) _exit(70);
      for (int i = 0; i < cfg->n_parent_fds; i++) close(cfg->parent_fds[i]);
      prepare_child();
      return 0;
    }
    child = pid;
    for (int i = 0; i < 4; i++) close(cfg->child_ends + i);
    if (cfg->trace) {
      last_fork_us = now_us(CLOCK_MONOTONIC) - tf;
      last_fork_cpu_us = now_us(CLOCK_THREAD_CPUTIME_ID) - cf;
      last_fork_faults = minor_faults() - ff;
    }
  }
}
