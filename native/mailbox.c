/*
 * The shared-memory path's message channel (comm/mailbox.py): the mailboxes; the Python type over them,
 * _playground_native.Mailboxes, is mailbox_type.c.
 *
 * Why C: a message between two ranks on one host needs a few cache-line transfers (0.7 us a round
 * trip here); a wake-up through the kernel costs 4-25 us, and a Python poll loop ~1 us a turn
 * while holding the GIL. So the wait is in C, with the GIL released: it polls one word, with the
 * pause instruction while ranks do not outnumber cores (or yielding the core between polls, up to
 * two ranks per core or when another rank waits on this core), then sleeps on it with a futex.
 *
 * One file per receiving rank r, `mbox-<r>` in the run's /dev/shm directory, mapped by r and by
 * every rank that sends to it:
 *
 *   bell page (4 KiB)   u32 bell      bumped by every sender after it publishes (the futex word)
 *                       u32 sleeping  1 while r sleeps in FUTEX_WAIT: only then do senders wake it
 *                       u32 room      set by a receiver that freed a slot r was waiting for
 *                       geometry      magic, slots, slot bytes, ranks (checked by every sender)
 *                       i32 cpu       where r last waited: a rank on the same core does not spin
 *   mailbox of sender s (one per s, page-aligned):
 *                       u64 consumed  messages r has taken from s (only r writes it)
 *                       u32 waiting   s found the mailbox full and waits for room (only s sets it)
 *                       slots[K]      each [u64 seq][u32 len][u32 pad][len bytes]
 *
 * Message m (1, 2, ...) from s goes into slot (m - 1) % K: the sender copies the bytes, then
 * publishes seq = m with a release store; the receiver polls the slot of the next m it expects
 * with an acquire load, copies the bytes out and stores consumed = m (release), which frees the
 * slot. So each (sender, receiver) pair is a FIFO: per-sender order holds by construction.
 *
 * Waiting for "any sender": every sender bumps the receiver's bell after publishing, so the
 * receiver watches one word instead of N-1 slots, and scans the mailboxes only when it changed.
 * Sleeping follows the futex pattern: the receiver sets `sleeping`, re-reads the bell and sleeps
 * only if it is unchanged; a sender bumps the bell, then reads `sleeping` (both sequentially
 * consistent), so a wake-up is never lost and never paid for while the receiver is awake. Sleeps
 * are bounded by the caller's timeout, so the communicator still checks deadlines and aborts.
 *
 * land() and exchange() take a small array without making a Python object of it: when the next
 * message is the one the caller expects (same sender, its header byte for byte, the right length),
 * its payload is reduced or copied from the slot into the caller's array (reduce.c) and the slot
 * freed; any other message is returned as bytes, as receive() returns it. exchange() posts first.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mailbox.h"

#define HELD_SPIN_NS 2000.0 /* how long a spinning receiver polls before it releases the GIL */

static void path_of(const Mailboxes *self, int rank, char *out, size_t n) {
    snprintf(out, n, "%s/mbox-%d", self->dir, rank);
}

static inline char *mailbox_in(const Mailboxes *self, char *file, int sender) {
    return file + BELL_BYTES + (size_t)sender * self->stride;
}

static inline SlotHeader *slot_in(const Mailboxes *self, char *mailbox, uint64_t m) {
    return (SlotHeader *)(mailbox + MAILBOX_HEADER_BYTES + ((m - 1) % self->slots) * self->slot_bytes);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define WARM_OUT 1
#define WARM_IN 2

/* A pair's first record longer than a page maps all its mailbox's pages at once (written by the
 * sender, read by the receiver), so that its next 15 records do not fault in a fresh slot each, page
 * by page (a 64 KiB record: 17 faults on each side); without it, a run's first 16 large messages to
 * each peer paid them (2-rank send/recv of 64 KiB, 10 calls after 3 warm-ups: 53-64 us a call, 18-27 with it).
 * MADV_POPULATE_* maps without changing a byte, so records in flight are safe; where the kernel has
 * no such advice (before 5.14) the pages fault in as they are used, as before. Only pairs that send
 * such records use the memory, which their 16 slots would touch within 16 of them anyway. */
static void warm_up(Mailboxes *self, int peer, char *mailbox, uint8_t side, int advice, uint32_t len) {
    if (len <= PAGE || (self->warm[peer] & side)) return;
    self->warm[peer] |= side;
    madvise(mailbox, self->stride, advice);
}

void mbox_ring(Bell *b) {
    __atomic_fetch_add(&b->bell, 1, __ATOMIC_SEQ_CST);
    if (LOAD_SC(&b->sleeping)) syscall(SYS_futex, &b->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* The peer's file, mapped on first use; NULL (no exception) if it does not exist yet. */
char *mbox_peer_file(Mailboxes *self, int rank) {
    if (self->peer[rank]) return self->peer[rank];
    char path[PATH_MAX];
    path_of(self, rank, path, sizeof path);
    int fd = open(path, O_RDWR);
    if (fd < 0) {
        if (errno == ENOENT) return NULL;
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || (size_t)st.st_size != self->file_bytes) {
        close(fd);
        PyErr_Format(PyExc_RuntimeError, "%s: %lld bytes, expected %zu (another geometry or a stale file)",
                     path, (long long)st.st_size, self->file_bytes);
        return NULL;
    }
    void *p = mmap(NULL, self->file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return NULL;
    }
    Bell *b = bell_of(p);
    if (b->magic != MAGIC || b->slots != self->slots || b->slot_bytes != self->slot_bytes ||
        b->size != (uint32_t)self->size) {
        munmap(p, self->file_bytes);
        PyErr_Format(PyExc_RuntimeError, "%s: not a mailbox file of this run's geometry", path);
        return NULL;
    }
    self->peer[rank] = p;
    return p;
}

/* A sender whose next message is waiting; -1 if none (then quiet_bell = the bell read before). */
int mbox_scan(Mailboxes *self) {
    uint32_t b = LOAD_ACQ(&bell_of(self->own)->bell);
    int n = self->size;
    for (int i = 0; i < n; i++) {
        int s = self->scan_from + i;
        if (s >= n) s -= n;
        SlotHeader *slot = slot_in(self, mailbox_in(self, self->own, s), self->expected[s]);
        if (LOAD_ACQ(&slot->seq) == self->expected[s]) {
            self->scan_from = s + 1 < n ? s + 1 : 0; /* the next scan starts after it: fair */
            return s;
        }
    }
    self->quiet_bell = b;
    return -1;
}

/* Without the GIL: a sender with a message, or -1 at the deadline or when room was rung.
 * First `pause_ns` of polling with the pause instruction (a peer on another core answers within a
 * few microseconds), then polling that yields the core until `yield_ns` (a peer that shares this
 * core gets to run), then FUTEX_WAIT on the bell. */
static int wait_any(Mailboxes *self, double timeout_ms, double pause_ns, double yield_ns) {
    Bell *bell = bell_of(self->own);
    double start = mono_ns();
    double deadline = start + timeout_ms * 1e6;
    if (__atomic_exchange_n(&bell->room, 0, __ATOMIC_SEQ_CST)) return -1;
    double spin_end = start + (pause_ns > yield_ns ? pause_ns : yield_ns);
    double pause_end = start + pause_ns;
    if (spin_end > start) {
        int pausing = pause_ns > 0;
        for (unsigned i = 1;; i++) {
            if (LOAD_ACQ(&bell->bell) != self->quiet_bell) {
                int s = mbox_scan(self);
                if (s >= 0) {
                    if (pausing)
                        self->found_pausing++;
                    else
                        self->found_yielding++;
                    return s;
                }
                if (__atomic_exchange_n(&bell->room, 0, __ATOMIC_SEQ_CST)) return -1;
            }
            if (pausing) {
                cpu_relax();
                if ((i & 31) == 0 && mono_ns() >= pause_end) pausing = 0;
            } else {
                sched_yield();
                if (mono_ns() >= spin_end) break;
            }
        }
    }
    for (;;) {
        if (LOAD_ACQ(&bell->bell) != self->quiet_bell) {
            int s = mbox_scan(self);
            if (s >= 0) return s;
            if (__atomic_exchange_n(&bell->room, 0, __ATOMIC_SEQ_CST)) return -1;
        }
        double now = mono_ns();
        if (now >= deadline) return -1;
        double left = deadline - now;
        struct timespec ts = {(time_t)(left / 1e9), (long)((long long)left % 1000000000LL)};
        self->slept++;
        STORE_SC(&bell->sleeping, 1);
        uint32_t seen = self->quiet_bell;
        if (LOAD_SC(&bell->bell) == seen)
            syscall(SYS_futex, &bell->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
        STORE_SC(&bell->sleeping, 0);
    }
}

/* With the GIL: does another rank's last wait put it on `cpu`? Then pause-spinning here would
 * keep it from running: measured, two ranks on one core round-trip in 415 us pausing 200 us
 * each, 8.6 us sleeping at once. After a fork, and with other jobs on the machine, the scheduler
 * often leaves two ranks on one core for a while. */
int mbox_shares_cpu(Mailboxes *self, int cpu) {
    for (int r = 0; r < self->size; r++) {
        if (r == self->rank) continue;
        char *file = mbox_peer_file(self, r);
        if (!file) {
            PyErr_Clear();
            continue;
        }
        if (__atomic_load_n(&bell_of(file)->cpu, __ATOMIC_RELAXED) == cpu) return 1;
    }
    return 0;
}

/* With the GIL: free the slot of sender s's message m (taken), ring s if it waits for room. */
static void free_slot(Mailboxes *self, int s, char *mailbox, uint64_t m) {
    MailboxHeader *h = (MailboxHeader *)mailbox;
    self->expected[s] = m + 1;
    STORE_SC(&h->consumed, m);
    if (LOAD_SC(&h->waiting)) {
        STORE_SC(&h->waiting, 0);
        char *file = mbox_peer_file(self, s);
        if (!file) {
            PyErr_Clear(); /* the sender is gone: nobody to tell */
        } else {
            Bell *b = bell_of(file);
            STORE_SC(&b->room, 1);
            mbox_ring(b);
        }
    }
}

/* Sender s's next slot and its length; NULL (RuntimeError set) if the length is impossible. */
static SlotHeader *next_slot(Mailboxes *self, int s, uint32_t *len) {
    uint64_t m = self->expected[s];
    SlotHeader *slot = slot_in(self, mailbox_in(self, self->own, s), m);
    *len = slot->len;
    if (*len > self->slot_bytes - SLOT_HEADER_BYTES) {
        PyErr_Format(PyExc_RuntimeError, "mailbox from rank %d: message %llu claims %u bytes", s,
                     (unsigned long long)m, *len);
        return NULL;
    }
    warm_up(self, s, mailbox_in(self, self->own, s), WARM_IN, MADV_POPULATE_READ, *len);
    return slot;
}

/* With the GIL: copy sender s's next message out, free its slot, ring s if it waits for room. */
static PyObject *take(Mailboxes *self, int s) {
    uint32_t len;
    SlotHeader *slot = next_slot(self, s, &len);
    if (!slot) return NULL;
    PyObject *bytes = PyBytes_FromStringAndSize((char *)slot + SLOT_HEADER_BYTES, len);
    if (!bytes) return NULL;
    free_slot(self, s, mailbox_in(self, self->own, s), self->expected[s]);
    return bytes;
}

/* The sender of the next message, waiting up to timeout_ms as `receive` documents; -1 if none. */
static int next_sender(Mailboxes *self, double timeout_ms, double pause_ns, double yield_ns, int expect) {
    int s = mbox_scan(self);
    if (s < 0 && timeout_ms > 0) {
        int cpu = sched_getcpu();
        __atomic_store_n(&bell_of(self->own)->cpu, cpu, __ATOMIC_RELAXED);
        self->waits++;
        if (pause_ns > 0 && cpu >= 0 && mbox_shares_cpu(self, cpu)) {
            self->shared_core++;
            /* Poll yielding instead: the rank on this core runs, and this one stays runnable, so
             * the scheduler's balancer sees two busy ranks here and moves one to another core
             * (sleeping would make this core look half idle and keep them together). */
            if (yield_ns < pause_ns) yield_ns = pause_ns;
            pause_ns = 0;
        }
        if (pause_ns > 0) { /* the answer to a small exchange is usually under a microsecond away: wait
                             * for it a little with the GIL held, before paying to release and take it,
                             * watching the slot of the sender expected (`expect`, if any): its line
                             * brings the message with the news, where the bell is one line more */
            Bell *bell = bell_of(self->own);
            SlotHeader *want = NULL;
            uint64_t m = 0;
            if (expect >= 0) {
                m = self->expected[expect];
                want = slot_in(self, mailbox_in(self, self->own, expect), m);
            }
            double end = mono_ns() + (pause_ns < HELD_SPIN_NS ? pause_ns : HELD_SPIN_NS);
            for (unsigned i = 1;; i++) {
                if (want && LOAD_ACQ(&want->seq) == m) {
                    self->found_pausing++;
                    return expect;
                }
                if (LOAD_ACQ(&bell->bell) != self->quiet_bell && (s = mbox_scan(self)) >= 0) {
                    self->found_pausing++;
                    return s;
                }
                cpu_relax();
                if ((i & 15) == 0 && mono_ns() >= end) break;
            }
        }
        self->busy = 1;
        Py_BEGIN_ALLOW_THREADS
        s = wait_any(self, timeout_ms, pause_ns, yield_ns);
        Py_END_ALLOW_THREADS
        self->busy = 0;
    }
    return s;
}

/* With the GIL: set up `self` for rank `rank` of `size`: create and map its own file in `dir` (its
 * bell and one mailbox of `slots` slots per sender), peers' files mapped later on first use. 0, or -1
 * with an exception. */
int mbox_create(Mailboxes *self, const char *dir, int rank, int size, unsigned int slots, unsigned int slot_bytes) {
    self->rank = rank;
    self->size = size;
    self->slots = slots;
    self->slot_bytes = slot_bytes;
    self->stride = ((size_t)MAILBOX_HEADER_BYTES + (size_t)slots * slot_bytes + PAGE - 1) / PAGE * PAGE;
    self->file_bytes = BELL_BYTES + (size_t)size * self->stride;
    self->dir = PyMem_Malloc(strlen(dir) + 1);
    self->peer = PyMem_Calloc(size, sizeof(char *));
    self->expected = PyMem_Calloc(size, sizeof(uint64_t));
    self->next = PyMem_Calloc(size, sizeof(uint64_t));
    self->warm = PyMem_Calloc(size, 1);
    if (!self->dir || !self->peer || !self->expected || !self->next || !self->warm) {
        PyErr_NoMemory();
        return -1;
    }
    strcpy(self->dir, dir);
    for (int r = 0; r < size; r++) self->expected[r] = self->next[r] = 1;
    char path[PATH_MAX];
    path_of(self, rank, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return -1;
    }
    if (ftruncate(fd, (off_t)self->file_bytes) < 0) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, self->file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return -1;
    }
    self->own = p;
    self->peer[rank] = p;
    Bell *b = bell_of(p);
    b->slots = slots;
    b->slot_bytes = slot_bytes;
    b->size = (uint32_t)size;
    b->cpu = -1;
    STORE_REL(&b->magic, MAGIC); /* last: a sender that sees it sees the geometry too */
    self->quiet_bell = 0;
    return 0;
}

/* Unmap every file and remove this rank's (not while `busy`: a wait without the GIL reads them). */
void mbox_unmap_all(Mailboxes *self) {
    if (self->peer) {
        for (int r = 0; r < self->size; r++) {
            if (self->peer[r] && self->peer[r] != self->own) munmap(self->peer[r], self->file_bytes);
            self->peer[r] = NULL;
        }
    }
    if (self->own) {
        munmap(self->own, self->file_bytes);
        self->own = NULL;
        char path[PATH_MAX];
        path_of(self, self->rank, path, sizeof path);
        unlink(path);
    }
}

/* With the GIL: post head + body to rank dst's mailbox. 1 posted, 0 no room (or no file yet),
 * -1 with an exception (a message larger than a slot). */
int mbox_post(Mailboxes *self, int dst, const void *head, size_t head_len, const void *body, size_t body_len) {
    size_t len = head_len + body_len;
    if (len > self->slot_bytes - SLOT_HEADER_BYTES) {
        PyErr_Format(PyExc_ValueError, "a %zu-byte message does not fit a mailbox slot (at most %u bytes)", len,
                     self->slot_bytes - SLOT_HEADER_BYTES);
        return -1;
    }
    char *file = mbox_peer_file(self, dst);
    if (!file) return PyErr_Occurred() ? -1 : 0;
    char *mailbox = mailbox_in(self, file, self->rank);
    MailboxHeader *h = (MailboxHeader *)mailbox;
    uint64_t m = self->next[dst];
    if (m - 1 - LOAD_ACQ(&h->consumed) >= self->slots) {
        STORE_SC(&h->waiting, 1); /* then look again: the receiver may have freed a slot meanwhile */
        if (m - 1 - LOAD_SC(&h->consumed) >= self->slots) return 0;
    }
    warm_up(self, dst, mailbox, WARM_OUT, MADV_POPULATE_WRITE, (uint32_t)(SLOT_HEADER_BYTES + len));
    SlotHeader *slot = slot_in(self, mailbox, m);
    char *payload = (char *)slot + SLOT_HEADER_BYTES;
    memcpy(payload, head, head_len);
    if (body_len) memcpy(payload + head_len, body, body_len);
    slot->len = (uint32_t)len;
    STORE_REL(&slot->seq, m);
    self->next[dst] = m + 1;
    mbox_ring(bell_of(file));
    return 1;
}

/* With the GIL: the next message from any sender as bytes, waiting as `receive` documents; None at the
 * deadline or on room, NULL with an exception. */
PyObject *mbox_receive(Mailboxes *self, double timeout_ms, double pause_ns, double yield_ns) {
    int s = next_sender(self, timeout_ms, pause_ns, yield_ns, -1);
    if (s < 0) Py_RETURN_NONE;
    return take(self, s);
}

/* With the GIL, `target` (and `base`) held: what `land` returns after the buffers are checked. */
PyObject *mbox_land_into(Mailboxes *self, double timeout_ms, double pause_ns, double yield_ns, long src,
                           const Py_buffer *head, const Py_buffer *target, int code, const void *base) {
    int s = next_sender(self, timeout_ms, pause_ns, yield_ns, (int)src);
    if (s < 0) Py_RETURN_NONE;
    if (s == src) {
        uint32_t len;
        SlotHeader *slot = next_slot(self, s, &len);
        if (!slot) return NULL;
        char *record = (char *)slot + SLOT_HEADER_BYTES;
        if ((size_t)len == (size_t)head->len + (size_t)target->len && memcmp(record, head->buf, head->len) == 0 &&
            reduce_small(code, target->buf, base ? base : target->buf, record + head->len, target->len) == 0) {
            free_slot(self, s, mailbox_in(self, self->own, s), self->expected[s]);
            Py_RETURN_TRUE;
        }
    }
    return take(self, s); /* not the one asked for: the caller decodes and parks it */
}
