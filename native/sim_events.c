/*
 * The simulator's event queue: a binary heap of 40-byte Event records in SimEngine.heap, by time then
 * posting order (so events at one time run first-posted first, as playground/sim/engine.py's heap of
 * (time, seq) runs them). The lowest piece of the event core: the engine (sim_engine.c) runs what it
 * pops, and the shared cores (sim_cpu.c) post their changes here without knowing the engine.
 */
#include "sim.h"

static inline int ev_before(const Event *a, const Event *b) {
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

int sim_post_event(SimEngine *e, double t, int kind, int rank, SimMessage *msg, double seconds) {
    if (e->heap_len == e->heap_cap) {
        Py_ssize_t cap = e->heap_cap ? 2 * e->heap_cap : 64;
        Event *h = PyMem_Realloc(e->heap, cap * sizeof(Event));
        if (!h) {
            PyErr_NoMemory();
            return -1;
        }
        e->heap = h, e->heap_cap = cap;
    }
    Event ev = {t, ++e->seq, msg, seconds, kind, rank};
    Py_XINCREF(msg);
    Event *h = e->heap;
    Py_ssize_t i = e->heap_len++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (!ev_before(&ev, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = ev;
    return 0;
}

Event sim_pop_event(SimEngine *e) {
    Event *h = e->heap, top = h[0];
    Py_ssize_t n = --e->heap_len;
    if (n > 0) {
        Event last = h[n];
        Py_ssize_t i = 0;
        for (;;) {
            Py_ssize_t c = 2 * i + 1;
            if (c >= n) break;
            if (c + 1 < n && ev_before(&h[c + 1], &h[c])) c++;
            if (!ev_before(&h[c], &last)) break;
            h[i] = h[c];
            i = c;
        }
        h[i] = last;
    }
    return top;
}
