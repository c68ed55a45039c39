/*
 * What mailbox.c and stream.c share: the layout of a rank's mailbox file (its bell), the Mailboxes
 * object, and the few helpers both use (time, the bell, a peer's file, the one-core check).
 * mailbox.c's header comment has the layout and the memory ordering.
 */
#ifndef PLAYGROUND_MAILBOX_H
#define PLAYGROUND_MAILBOX_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <time.h>

#define BELL_BYTES 4096
#define MAILBOX_HEADER_BYTES 128
#define SLOT_HEADER_BYTES 16
#define PAGE 4096
#define MAGIC 0x786f626dU /* "mbox" */

#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LOAD_SC(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define STORE_SC(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ volatile("yield" ::: "memory");
#else
    __asm__ volatile("" ::: "memory");
#endif
}

typedef struct {
    uint32_t bell;
    uint32_t sleeping;
    uint32_t room;
    uint32_t pad0;
    uint32_t magic, slots, slot_bytes, size;
    char pad1[32];
    int32_t cpu; /* +64, its own line: the CPU this rank last waited on (-1: not yet) */
} Bell;

typedef struct {
    uint64_t consumed;
    char pad[56];
    uint32_t waiting;
} MailboxHeader;

typedef struct {
    uint64_t seq;
    uint32_t len;
    uint32_t pad;
} SlotHeader;

typedef struct {
    PyObject_HEAD
    int rank, size;
    uint32_t slots, slot_bytes;
    size_t stride, file_bytes;
    char *dir;
    char *own;         /* this rank's file: its bell and its inbound mailboxes */
    char **peer;       /* each peer's file, mapped on first use (NULL until then) */
    uint64_t *expected; /* next message number from each sender */
    uint64_t *next;     /* next message number to each receiver */
    uint8_t *warm;      /* per peer: WARM_OUT once its mailbox here was populated for writing, WARM_IN for reading */
    uint32_t quiet_bell; /* the bell's value when a scan last found every mailbox empty */
    int scan_from;
    int busy;           /* inside receive() with the GIL released: close() must not unmap */
    /* what the waits did, for `stats`: found while pausing, while yielding, after sleeping */
    uint64_t waits, shared_core, found_pausing, found_yielding, slept;
} Mailboxes;

static inline double mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline Bell *bell_of(char *file) { return (Bell *)file; }

/* mailbox.c: the mailboxes (each with the GIL held unless it says otherwise) */
int mbox_create(Mailboxes *self, const char *dir, int rank, int size, unsigned int slots, unsigned int slot_bytes);
void mbox_unmap_all(Mailboxes *self);             /* every file unmapped, this rank's removed */
PyObject *mbox_receive(Mailboxes *self, double timeout_ms, double pause_ns, double yield_ns); /* bytes or None */
void mbox_ring(Bell *b);                          /* bump the bell; wake its rank if it sleeps */
char *mbox_peer_file(Mailboxes *self, int rank);  /* mapped on first use; NULL if not there (yet) */
int mbox_shares_cpu(Mailboxes *self, int cpu);    /* another rank last waited on `cpu` */
int mbox_scan(Mailboxes *self);                   /* a sender whose next message waits, or -1 */
/* post head + body to dst's mailbox: 1 posted, 0 no room, -1 error */
int mbox_post(Mailboxes *self, int dst, const void *head, size_t head_len, const void *body, size_t body_len);
/* land the next message from src if it is `head` + len(target) bytes: True, or the message's bytes, or None */
PyObject *mbox_land_into(Mailboxes *self, double timeout_ms, double pause_ns, double yield_ns, long src,
                         const Py_buffer *head, const Py_buffer *target, int code, const void *base);
int reduce_small(int code, void *out, const void *a, const void *b, size_t nbytes); /* reduce.c */
PyObject *Mailboxes_stream(Mailboxes *self, PyObject *const *args, Py_ssize_t nargs); /* stream.c */
extern const char Mailboxes_stream_doc[];
PyTypeObject *mbox_type(void); /* mailbox_type.c: Mailboxes */

#endif
