/* The sample zygote's per-sample loop, in C.
 *
 * Every sample is a fork of the zygote, and fork write-protects all of the
 * zygote's memory: each page the zygote writes afterwards costs it a page
 * fault, and while the sample still runs, a copy. The same loop in Python
 * touches a few hundred pages per sample (reference counts, frames, the
 * objects of each message), and runs a quarter of a millisecond of bytecode.
 * Here it touches a few pages of C buffers and stack, and the Python heap the
 * samples are forked from stays as it is from one sample to the next.
 *
 * It does exactly what ``SampleRole`` does in Python (see sample_role.py,
 * which is also the fallback where this module is not built, and the only
 * loop for a worker without its own pid namespace), speaking the same binary
 * protocol (``control.RUN`` and ``control.RESULT``):
 *
 *   1. read one request (header, descriptors, body, program and stdin);
 *   2. mount a fresh scratch tmpfs on /tmp and put the child's descriptors
 *      0-3 in place;
 *   3. fork; the child starts a new session, closes every other descriptor,
 *      confines itself (resource limits, identity, capabilities, seccomp: the
 *      plan ``prepare`` built) and calls back into Python (``child``), which
 *      runs the program and never returns;
 *   4. zero the program, watch the child's pidfd and output pipes until it
 *      exits, overruns its time or floods its output;
 *   5. SIGKILL every process of the pid namespace (this zygote is its init),
 *      reap them all, unmount the scratch space and send the plain facts.
 *
 * Python code runs in the zygote only when a request brings limits unlike
 * the last one (``prepare``, which builds the child's confinement plan), and
 * in the child only once it is confined.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define MAX_FDS 16
#define READ_CHUNK 65536
/* Exit statuses, defined once in exit_codes.py; setup.py passes them as macros. */
#if !defined(EVALSWEEP_SETUP_FAILED) || !defined(EVALSWEEP_UNCLEAN) ||                          \
    !defined(EVALSWEEP_SETUP_FAILED_LINE)
#error "build through setup.py: the exit statuses come from exit_codes.py"
#endif

/* control.RUN: "<4sQdQQQQIIII"; serve() checks the size against Python's. */
#define RUN_SIZE 68
/* control.RESULT: "<4sQBBBBBxxxiddqQQII"; likewise. */
#define RESULT_SIZE 72

/* supervise.py's timing constants, handed to serve() by Python so that the
 * two loops cannot drift apart. */
static double wall_factor, stop_grace, stop_watch_after, reap_budget, judge_wait_factor,
    judge_wait_grace;

typedef struct {
    unsigned char *data;
    size_t len, cap;
} Buffer;

typedef struct {
    unsigned char *data;
    size_t kept, keep, cap;
    uint64_t total;
} Capture;

/* confine.Confinement, as ``prepare`` hands it over (see apply_confinement). */
#define MAX_RLIMITS 16
typedef struct {
    int rlimits;
    int resource[MAX_RLIMITS];
    rlim_t soft[MAX_RLIMITS], hard[MAX_RLIMITS];
    int switch_ids;
    uid_t uid;
    gid_t gid;
    int drop_capabilities, dumpable, no_new_privs;
    struct sock_filter *filter;
    unsigned short filter_length;
    int set_oom_score_adj, oom_score_adj;
} Confinement;

typedef struct {
    int exited_by_itself, timed_out, stopped, output_limit;
    int have_status, status;
    double wall, cpu;
    long max_rss_kb;
} Watch;

static int reserve(Buffer *buffer, size_t size) {
    if (size <= buffer->cap)
        return 0;
    size_t cap = buffer->cap ? buffer->cap : 4096;
    while (cap < size)
        cap *= 2;
    unsigned char *grown = realloc(buffer->data, cap);
    if (grown == NULL)
        return -1;
    buffer->data = grown;
    buffer->cap = cap;
    return 0;
}

static double monotonic(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static uint32_t get_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t get_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static double get_f64(const unsigned char *p) {
    double v;
    memcpy(&v, p, 8);
    return v;
}

/* The parent is gone (end-of-file) or done: the whole sandbox ends with us. */
static void parent_gone(void) { _exit(0); }

static int read_exact(int fd, unsigned char *into, size_t size) {
    while (size) {
        ssize_t got = read(fd, into, size);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (got == 0)
            parent_gone();
        into += got;
        size -= (size_t)got;
    }
    return 0;
}

static int write_all(int fd, const unsigned char *data, size_t size) {
    while (size) {
        ssize_t put = send(fd, data, size, MSG_NOSIGNAL);
        if (put < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        data += put;
        size -= (size_t)put;
    }
    return 0;
}

/* One request's header and descriptors (control.receive's framing). */
static int receive_header(int ctl, uint32_t *body_size, int *fds, int *nfds) {
    unsigned char header[8];
    union {
        char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
        struct cmsghdr align;
    } control;
    struct iovec iov = {header, sizeof header};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t got;
    do {
        got = recvmsg(ctl, &msg, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
    if (got < 0)
        return -1;
    if (got == 0)
        parent_gone();
    *nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count && *nfds < MAX_FDS; i++)
            memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    if ((size_t)got < sizeof header && read_exact(ctl, header + got, sizeof header - (size_t)got))
        return -1;
    *body_size = ((uint32_t)header[0] << 24) | ((uint32_t)header[1] << 16) |
                 ((uint32_t)header[2] << 8) | (uint32_t)header[3];
    return 0;
}

/* How much of the read buffer holds this sample's output (zeroed after it). */
static size_t chunk_dirty;

static void capture_add(Capture *capture, const unsigned char *chunk, size_t size) {
    if (size > chunk_dirty)
        chunk_dirty = size;
    size_t room = capture->keep > capture->kept ? capture->keep - capture->kept : 0;
    size_t take = size < room ? size : room;
    if (take) {
        memcpy(capture->data + capture->kept, chunk, take);
        capture->kept += take;
    }
    capture->total += size;
}

static int capture_reset(Capture *capture, size_t keep) {
    if (keep > capture->cap) {
        unsigned char *grown = realloc(capture->data, keep);
        if (grown == NULL)
            return -1;
        capture->data = grown;
        capture->cap = keep;
    }
    capture->keep = keep;
    capture->kept = 0;
    capture->total = 0;
    return 0;
}

/* Seconds the child has spent runnable but waiting for a CPU (supervise.waited_for_cpu). */
static double waited_for_cpu(pid_t pid) {
    char path[64], text[128];
    snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0.0;
    ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    if (got <= 0)
        return 0.0;
    text[got] = '\0';
    unsigned long long running, waiting;
    if (sscanf(text, "%llu %llu", &running, &waiting) != 2)
        return 0.0;
    return (double)waiting / 1e9;
}

static void record_exit(Watch *seen, int status, const struct rusage *usage) {
    seen->have_status = 1;
    seen->status = status;
    seen->cpu = (double)usage->ru_utime.tv_sec + (double)usage->ru_utime.tv_usec * 1e-6 +
                (double)usage->ru_stime.tv_sec + (double)usage->ru_stime.tv_usec * 1e-6;
    seen->max_rss_kb = usage->ru_maxrss;
}

/* supervise.Watcher.watch: until the child exits, overruns or floods. */
static void watch(pid_t pid, int pidfd, int out, int err, int judge_done, double started,
                  double timeout, uint64_t output_limit, Capture *captures, Watch *seen,
                  unsigned char *chunk) {
    struct pollfd polled[4] = {
        {out, POLLIN, 0}, {err, POLLIN, 0}, {pidfd, POLLIN, 0}, {-1, 0, 0}};
    double deadline = started + timeout;
    double last_deadline = started + wall_factor * timeout;
    double stop_at = INFINITY;
    double watch_from = judge_done >= 0 ? started + stop_watch_after : INFINITY;
    for (;;) {
        double now = monotonic();
        if (now >= watch_from && judge_done >= 0) {
            polled[3].fd = judge_done; /* reports only the hang-up */
            watch_from = INFINITY;
        }
        if (now >= stop_at) {
            seen->stopped = 1;
            break;
        }
        double remaining = deadline - now;
        if (remaining <= 0) {
            double extended = started + timeout + waited_for_cpu(pid);
            deadline = extended < last_deadline ? extended : last_deadline;
            if (deadline - monotonic() > 0.001)
                continue;
            seen->timed_out = 1;
            break;
        }
        double wait = remaining;
        if (stop_at - now < wait)
            wait = stop_at - now;
        if (watch_from - now < wait)
            wait = watch_from - now;
        double wait_ms = ceil(wait * 1000.0);
        int ready = poll(polled, 4, wait_ms < 86400000.0 ? (int)wait_ms : 86400000);
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            break; /* cannot happen with valid descriptors; the reaper takes over */
        }
        if (ready == 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (polled[i].fd < 0 || polled[i].revents == 0)
                continue;
            ssize_t got = read(polled[i].fd, chunk, READ_CHUNK);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                polled[i].fd = -1;
                continue;
            }
            capture_add(&captures[i], chunk, (size_t)got);
        }
        if (captures[0].total + captures[1].total > output_limit) {
            seen->output_limit = 1;
            break;
        }
        if (polled[2].revents) {
            seen->exited_by_itself = 1;
            break;
        }
        if (polled[3].fd >= 0 && polled[3].revents) {
            polled[3].fd = -1;
            stop_at = monotonic() + stop_grace;
        }
    }
    seen->wall = monotonic() - started;
}

/* supervise.wait_for_hangup: until every writer of the pipe has closed it, or ``seconds``. */
static void wait_for_hangup(int fd, double seconds) {
    double end = monotonic() + seconds;
    unsigned char scrap[256];
    for (;;) {
        double remaining = end - monotonic();
        if (remaining <= 0)
            return;
        struct pollfd polled = {fd, POLLIN, 0};
        int ready = poll(&polled, 1, (int)ceil(remaining * 1000.0));
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0)
            return;
        if (ready == 0)
            continue;
        if (polled.revents & (POLLHUP | POLLERR))
            return;
        if (polled.revents & POLLIN) {
            ssize_t got = read(fd, scrap, sizeof scrap);
            if (got == 0 || (got < 0 && errno != EINTR))
                return;
        }
    }
}

/* supervise.reap_everything, as the pid namespace's init: 0 if nothing survived. */
static int reap_everything(pid_t main_pid, Watch *seen) {
    double give_up = monotonic() + reap_budget;
    struct rusage usage;
    int status;
    pid_t got;
    if (seen->exited_by_itself) {
        do {
            got = wait4(main_pid, &status, 0, &usage);
        } while (got < 0 && errno == EINTR);
        if (got == main_pid)
            record_exit(seen, status, &usage);
        do {
            got = wait4(-1, &status, WNOHANG, &usage);
        } while (got < 0 && errno == EINTR);
        if (got < 0 && errno == ECHILD)
            return 0;
    }
    kill(-1, SIGKILL);
    for (;;) {
        got = wait4(-1, &status, WNOHANG, &usage);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return 0; /* ECHILD: no process is left */
        }
        if (got == 0) {
            if (monotonic() > give_up)
                return -1;
            kill(-1, SIGKILL);
            struct timespec pause = {0, 500000};
            nanosleep(&pause, NULL);
            continue;
        }
        if (got == main_pid)
            record_exit(seen, status, &usage);
    }
}

/* supervise.drain_after: what is left in the pipes once every writer is dead. */
static void drain_after(const int *fds, Capture *captures, uint64_t output_limit, Watch *seen,
                        unsigned char *chunk) {
    for (int i = 0; i < 2; i++) {
        int flags = fcntl(fds[i], F_GETFL);
        fcntl(fds[i], F_SETFL, flags | O_NONBLOCK);
        while (captures[i].total <= output_limit) {
            ssize_t got = read(fds[i], chunk, READ_CHUNK);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                break;
            capture_add(&captures[i], chunk, (size_t)got);
        }
    }
    if (captures[0].total + captures[1].total > output_limit)
        seen->output_limit = 1;
}

static void put(unsigned char *into, const void *value, size_t size) { memcpy(into, value, size); }

static int send_result(int ctl, Buffer *reply, uint64_t id, const Watch *seen, int clean,
                       const Capture *captures) {
    size_t payload = RESULT_SIZE + captures[0].kept + captures[1].kept;
    if (reserve(reply, 4 + payload))
        return -1;
    unsigned char *p = reply->data;
    p[0] = (unsigned char)(payload >> 24);
    p[1] = (unsigned char)(payload >> 16);
    p[2] = (unsigned char)(payload >> 8);
    p[3] = (unsigned char)payload;
    p += 4;
    memcpy(p, "RES1", 4);
    put(p + 4, &id, 8);
    p[12] = (unsigned char)seen->exited_by_itself;
    p[13] = (unsigned char)seen->timed_out;
    p[14] = (unsigned char)seen->stopped;
    p[15] = (unsigned char)seen->output_limit;
    p[16] = (unsigned char)!clean;
    p[17] = p[18] = p[19] = 0;
    int32_t status = seen->have_status ? seen->status : -1;
    int64_t rss = seen->max_rss_kb;
    uint32_t lengths[2] = {(uint32_t)captures[0].kept, (uint32_t)captures[1].kept};
    put(p + 20, &status, 4);
    put(p + 24, &seen->wall, 8);
    put(p + 32, &seen->cpu, 8);
    put(p + 40, &rss, 8);
    put(p + 48, &captures[0].total, 8);
    put(p + 56, &captures[1].total, 8);
    put(p + 64, &lengths[0], 4);
    put(p + 68, &lengths[1], 4);
    memcpy(p + RESULT_SIZE, captures[0].data, captures[0].kept);
    memcpy(p + RESULT_SIZE + captures[0].kept, captures[1].data, captures[1].kept);
    int failed = write_all(ctl, reply->data, 4 + payload);
    /* The next sample is forked from this memory: keep nothing of this one's output. */
    memset(reply->data, 0, 4 + payload);
    return failed;
}

/* The plan ``prepare`` returned: (rlimits, (uid, gid) or None, drop_capabilities,
 * dumpable, no_new_privs, seccomp BPF bytes or None, oom_score_adj or None). */
static int read_confinement(PyObject *plan, Confinement *into) {
    PyObject *rlimits, *switch_to, *filter, *oom;
    int drop, dumpable, no_new_privs;
    if (!PyArg_ParseTuple(plan, "OOpppOO", &rlimits, &switch_to, &drop, &dumpable, &no_new_privs,
                          &filter, &oom))
        return -1;
    Confinement plain;
    memset(&plain, 0, sizeof plain);
    PyObject *items = PySequence_Fast(rlimits, "rlimits must be a sequence");
    if (items == NULL)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    if (count > MAX_RLIMITS) {
        Py_DECREF(items);
        PyErr_SetString(PyExc_ValueError, "too many resource limits");
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        unsigned long long soft, hard;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, i), "iKK", &plain.resource[i], &soft,
                              &hard)) {
            Py_DECREF(items);
            return -1;
        }
        plain.soft[i] = (rlim_t)soft;
        plain.hard[i] = (rlim_t)hard;
    }
    plain.rlimits = (int)count;
    Py_DECREF(items);
    if (switch_to != Py_None) {
        unsigned int uid, gid;
        if (!PyArg_ParseTuple(switch_to, "II", &uid, &gid))
            return -1;
        plain.switch_ids = 1;
        plain.uid = uid;
        plain.gid = gid;
    }
    plain.drop_capabilities = drop;
    plain.dumpable = dumpable;
    plain.no_new_privs = no_new_privs;
    if (oom != Py_None) {
        plain.set_oom_score_adj = 1;
        plain.oom_score_adj = (int)PyLong_AsLong(oom);
        if (PyErr_Occurred())
            return -1;
    }
    if (filter != Py_None) {
        char *bytes;
        Py_ssize_t size;
        if (PyBytes_AsStringAndSize(filter, &bytes, &size) < 0)
            return -1;
        if (size == 0 || size % (Py_ssize_t)sizeof(struct sock_filter) ||
            size / (Py_ssize_t)sizeof(struct sock_filter) > 0xFFFF) {
            PyErr_SetString(PyExc_ValueError, "a BPF program is a sequence of 8-byte instructions");
            return -1;
        }
        plain.filter = malloc((size_t)size);
        if (plain.filter == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(plain.filter, bytes, (size_t)size);
        plain.filter_length = (unsigned short)(size / (Py_ssize_t)sizeof(struct sock_filter));
    }
    free(into->filter);
    *into = plain;
    return 0;
}

/* confine.apply, in the child before any Python runs there; NULL or what failed. */
static const char *apply_confinement(const Confinement *plan) {
    if (plan->set_oom_score_adj) {
        /* Without /proc the cgroup limit still applies: not an error. */
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            char text[16];
            int size = snprintf(text, sizeof text, "%d", plan->oom_score_adj);
            if (write(fd, text, (size_t)size) < 0) {
            }
            close(fd);
        }
    }
    for (int i = 0; i < plan->rlimits; i++) {
        struct rlimit limit = {plan->soft[i], plan->hard[i]};
        if (setrlimit(plan->resource[i], &limit) != 0)
            return "setrlimit";
    }
    if (plan->switch_ids) {
        if (setgroups(0, NULL) != 0)
            return "setgroups";
        if (setresgid(plan->gid, plan->gid, plan->gid) != 0)
            return "setresgid";
        if (setresuid(plan->uid, plan->uid, plan->uid) != 0)
            return "setresuid";
    }
    if (plan->drop_capabilities) {
        /* linux.drop_all_capabilities: locked securebits (or empty bounding and
         * ambient sets), then empty capability sets. */
        if (prctl(28 /* PR_SET_SECUREBITS */, 0xEF, 0, 0, 0) != 0) {
            for (int cap = 0; prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0; cap++) {
            }
            prctl(47 /* PR_CAP_AMBIENT */, 4 /* PR_CAP_AMBIENT_CLEAR_ALL */, 0, 0, 0);
        }
        struct {
            uint32_t version;
            int pid;
        } header = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
        uint32_t data[6] = {0};
        if (syscall(SYS_capset, &header, data) != 0)
            return "capset";
    }
    if (plan->dumpable && prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0)
        return "prctl(PR_SET_DUMPABLE)";
    if ((plan->no_new_privs || plan->filter != NULL) &&
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return "prctl(PR_SET_NO_NEW_PRIVS)";
    if (plan->filter != NULL) {
        struct sock_fprog program = {plan->filter_length, plan->filter};
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) != 0)
            return "seccomp";
    }
    return NULL;
}

static PyObject *os_error(const char *what) {
    int saved = errno;
    PyErr_Format(PyExc_OSError, "sample loop: %s: %s", what, strerror(saved));
    return NULL;
}

/* In the child: never returns. */
static void become_sample(PyObject *child, const Confinement *plan, const unsigned char *message,
                          size_t message_size, const unsigned char *program, size_t program_size,
                          size_t stdin_size, int has_channel, const char *new_root) {
    PyOS_AfterFork_Child();
    setsid();
    /* None of the zygote's own descriptors stays open in the sample. */
    if (syscall(SYS_close_range, has_channel ? 4 : 3, ~0U, 0) != 0) {
        for (int fd = has_channel ? 4 : 3; fd < 1024; fd++)
            close(fd);
    }
    /* A split run's root: the files in memory only (jail.build_resident_root). */
    if (new_root != NULL && (chroot(new_root) != 0 || chdir("/tmp") != 0)) {
        char text[160];
        int size = snprintf(text, sizeof text, EVALSWEEP_SETUP_FAILED_LINE ": entering %s: %s\n",
                            new_root, strerror(errno));
        if (write(2, text, (size_t)size) < 0) {
        }
        _exit(EVALSWEEP_SETUP_FAILED);
    }
    /* Confined here, before the first line of Python runs in this process:
     * done from Python, the same calls cost the child some thirty copied pages. */
    const char *failed_step = apply_confinement(plan);
    if (failed_step != NULL) {
        char text[160];
        int size = snprintf(text, sizeof text, EVALSWEEP_SETUP_FAILED_LINE ": %s: %s\n",
                            failed_step, strerror(errno));
        if (write(2, text, (size_t)size) < 0) {
        }
        _exit(EVALSWEEP_SETUP_FAILED);
    }
    PyObject *result = PyObject_CallFunction(
        child, "y#y#y#OO", (const char *)message, (Py_ssize_t)message_size,
        (const char *)program, (Py_ssize_t)program_size, (const char *)program + program_size,
        (Py_ssize_t)stdin_size, has_channel ? Py_True : Py_False, Py_True);
    /* ``child`` exits by itself; reaching here is a failure of the sandbox's own code. */
    Py_XDECREF(result);
    static const char failed[] = EVALSWEEP_SETUP_FAILED_LINE " in the sample loop\n";
    if (write(2, failed, sizeof failed - 1) < 0) {
    }
    _exit(EVALSWEEP_SETUP_FAILED);
}

static PyObject *serve(PyObject *module, PyObject *args) {
    int ctl, devnull, log_fd, pid_counter;
    const char *pid_after, *resident_root;
    Py_ssize_t pid_after_size, resident_size;
    Py_ssize_t run_size, result_size;
    PyObject *prepare, *child;
    if (!PyArg_ParseTuple(args, "iiiOO(nndddddd)iy#y#", &ctl, &devnull, &log_fd, &prepare,
                          &child, &run_size, &result_size, &wall_factor, &stop_grace,
                          &stop_watch_after, &reap_budget, &judge_wait_factor, &judge_wait_grace,
                          &pid_counter, &pid_after, &pid_after_size, &resident_root,
                          &resident_size))
        return NULL;
    /* A split run's scratch space is the /tmp of the resident root it runs in. */
    char resident_tmp[256];
    if (resident_size <= 0 || (size_t)resident_size + 5 > sizeof resident_tmp ||
        strlen(resident_root) != (size_t)resident_size)
        resident_size = 0;
    else
        snprintf(resident_tmp, sizeof resident_tmp, "%s/tmp", resident_root);
    if (run_size != RUN_SIZE || result_size != RESULT_SIZE) {
        PyErr_SetString(PyExc_RuntimeError, "the C sample loop was built for another protocol");
        return NULL;
    }
    if (getpid() != 1) {
        PyErr_SetString(PyExc_RuntimeError, "the native sample loop runs only as a pid namespace's init");
        return NULL;
    }
    Buffer body = {0}, raw = {0}, last_prep = {0}, reply = {0};
    Confinement plan;
    memset(&plan, 0, sizeof plan);
    Capture captures[2] = {{0}, {0}};
    unsigned char *chunk = malloc(READ_CHUNK);
    int have_prep = 0;
    if (chunk == NULL)
        return PyErr_NoMemory();
    for (;;) {
        int fds[MAX_FDS], nfds = 0;
        uint32_t body_size;
        if (receive_header(ctl, &body_size, fds, &nfds))
            return os_error("reading a request");
        if (reserve(&body, body_size))
            return PyErr_NoMemory();
        if (read_exact(ctl, body.data, body_size))
            return os_error("reading a request");
        if (body_size < RUN_SIZE || memcmp(body.data, "RUN1", 4) != 0)
            _exit(0); /* anything else from the parent means: stop */
        uint64_t id = get_u64(body.data + 4);
        double timeout = get_f64(body.data + 12);
        uint64_t output_limit = get_u64(body.data + 20);
        uint64_t output_keep = get_u64(body.data + 28);
        uint64_t scratch_bytes = get_u64(body.data + 36);
        uint64_t scratch_inodes = get_u64(body.data + 44);
        uint32_t program_size = get_u32(body.data + 52);
        uint32_t stdin_size = get_u32(body.data + 56);
        uint32_t prep_size = get_u32(body.data + 60);
        int in_resident = resident_size > 0 && get_u32(body.data + 64) != 0;
        const char *scratch = in_resident ? resident_tmp : "/tmp";
        if ((uint64_t)RUN_SIZE + prep_size > body_size) {
            PyErr_SetString(PyExc_ValueError, "sample loop: malformed request");
            return NULL;
        }
        const unsigned char *prep = body.data + RUN_SIZE;
        const unsigned char *message = prep + prep_size;
        size_t message_size = body_size - RUN_SIZE - prep_size;
        size_t raw_size = (size_t)program_size + stdin_size;
        if (reserve(&raw, raw_size + 1) || capture_reset(&captures[0], output_keep) ||
            capture_reset(&captures[1], output_keep))
            return PyErr_NoMemory();
        if (read_exact(ctl, raw.data, raw_size))
            return os_error("reading a program");

        /* New limits: Python builds the child's confinement plan, here, once. */
        if (!have_prep || last_prep.len != prep_size || memcmp(last_prep.data, prep, prep_size)) {
            PyObject *confinement =
                PyObject_CallFunction(prepare, "y#", (const char *)prep, (Py_ssize_t)prep_size);
            if (confinement == NULL)
                return NULL;
            int unreadable = read_confinement(confinement, &plan);
            Py_DECREF(confinement);
            if (unreadable)
                return NULL;
            if (reserve(&last_prep, prep_size + 1))
                return PyErr_NoMemory();
            memcpy(last_prep.data, prep, prep_size);
            last_prep.len = prep_size;
            have_prep = 1;
        }

        char options[128];
        snprintf(options, sizeof options, "size=%llu,nr_inodes=%llu,mode=1777",
                 (unsigned long long)scratch_bytes, (unsigned long long)scratch_inodes);
        if (mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, options) != 0)
            return os_error("mounting the scratch space");
        /* Forked from inside the scratch space, the child starts there. */
        if (chdir(scratch) != 0)
            return os_error("entering the scratch space");
        int out[2], err[2];
        if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
            return os_error("creating output pipes");
        int rpc = nfds > 0 ? fds[0] : -1;
        int judge_done = nfds > 1 ? fds[1] : -1;
        dup2(out[1], 1);
        dup2(err[1], 2);
        if (rpc >= 0)
            dup2(rpc, 3);
        close(out[1]);
        close(err[1]);
        if (rpc >= 0)
            close(rpc);
        for (int i = 2; i < nfds; i++)
            close(fds[i]);

        /* Every run gets the same pid (and its threads the same numbers): no run can
         * leave a count behind for the next to read. */
        if (pid_counter >= 0 &&
            pwrite(pid_counter, pid_after, (size_t)pid_after_size, 0) != pid_after_size)
            return os_error("setting the next pid");
        double started = monotonic();
        PyOS_BeforeFork();
        pid_t pid = fork();
        if (pid == 0)
            become_sample(child, &plan, message, message_size, raw.data, program_size, stdin_size,
                          rpc >= 0, in_resident ? resident_root : NULL);
        PyOS_AfterFork_Parent();
        int saved = errno;
        dup2(devnull, 1);
        dup2(log_fd, 2);
        dup2(devnull, 3);
        if (pid < 0) {
            errno = saved;
            return os_error("fork");
        }
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0)
            return os_error("pidfd_open");
        /* The zygote keeps no copy of the program: the next sample is forked from this memory. */
        memset(raw.data, 0, raw_size);

        Watch seen;
        memset(&seen, 0, sizeof seen);
        watch(pid, pidfd, out[0], err[0], judge_done, started, timeout, output_limit, captures,
              &seen, chunk);
        int clean = reap_everything(pid, &seen) == 0;
        int pipes[2] = {out[0], err[0]};
        drain_after(pipes, captures, output_limit, &seen, chunk);
        /* The next sample is forked only once the judge is done with this one. */
        if (judge_done >= 0)
            wait_for_hangup(judge_done, timeout * judge_wait_factor + judge_wait_grace);
        close(pidfd);
        close(out[0]);
        close(err[0]);
        if (judge_done >= 0)
            close(judge_done);
        if (chdir("/") != 0) {
        }
        umount2(scratch, MNT_DETACH);
        int failed = send_result(ctl, &reply, id, &seen, clean, captures);
        memset(chunk, 0, chunk_dirty);
        chunk_dirty = 0;
        memset(captures[0].data, 0, captures[0].kept);
        memset(captures[1].data, 0, captures[1].kept);
        if (failed)
            parent_gone();
        if (!clean)
            _exit(EVALSWEEP_UNCLEAN); /* something survived SIGKILL: let the parent replace us */
    }
}

/* ------------------------------------------------------------------ the plain run's recursion depth
 *
 * The plain run execs the program a few frames above where ``python -c`` would (the
 * zygote's and the harness's frames lie below it). Those frames are taken off this
 * thread's count of its depth, the count the recursion limit is checked against: the
 * program then recurses exactly as deep as in a plain interpreter, reads and sets the
 * limit with the real builtins and gets a plain interpreter's numbers, and every thread it
 * starts (whose count starts at 0) is exactly as in one process. */

static PyObject *lower_depth(PyObject *module, PyObject *args) {
    int offset;
    if (!PyArg_ParseTuple(args, "i", &offset))
        return NULL;
    if (offset < 0) {
        PyErr_SetString(PyExc_ValueError, "the offset is a number of frames below the program");
        return NULL;
    }
    PyThreadState *tstate = PyThreadState_Get();
#if PY_VERSION_HEX >= 0x030C0000
    tstate->py_recursion_remaining += offset;
#else
    tstate->recursion_remaining += offset;
#endif
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"lower_depth", lower_depth, METH_VARARGS,
     "lower_depth(offset): take offset frames off this thread's recursion depth, as the "
     "recursion limit counts it (the plain run, see plain.py)."},
    {"serve", serve, METH_VARARGS,
     "serve(ctl_fd, devnull_fd, log_fd, prepare, child, (run_size, result_size, wall_factor, "
     "stop_grace, stop_watch_after, reap_budget, judge_wait_factor, judge_wait_grace), "
     "pid_counter_fd, pid_after): run samples until the parent hangs up; before each fork, "
     "pid_after is written to pid_counter_fd (ns_last_pid) unless it is -1."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sampleloop",
    "The sample zygote's per-sample loop in C (see sample_role.py for the same loop in Python).",
    -1, methods, NULL, NULL, NULL, NULL,
};

/* The statuses it was built with, exported so a test can check them against exit_codes.py. */
PyMODINIT_FUNC PyInit__sampleloop(void) {
    PyObject *built = PyModule_Create(&module);
    if (built == NULL)
        return NULL;
    if (PyModule_AddIntConstant(built, "SETUP_FAILED", EVALSWEEP_SETUP_FAILED) < 0 ||
        PyModule_AddIntConstant(built, "UNCLEAN", EVALSWEEP_UNCLEAN) < 0 ||
        PyModule_AddStringConstant(built, "SETUP_FAILED_LINE", EVALSWEEP_SETUP_FAILED_LINE) < 0) {
        Py_DECREF(built);
        return NULL;
    }
    return built;
}
