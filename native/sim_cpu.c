/*
 * Shared cores (playground/sim/network.py's model; `simulate --cores C`, or a calibrated host): the
 * ranks' CPU work runs on C cores, as an operating system's scheduler runs processes.
 *
 * - A rank that needs the CPU (a reduction, or with host costs the work of sending and receiving a
 *   message) asks at its own time (an EV_CPU event, so requests are served in time order); it gets a
 *   free core or waits, first come first served, and it is blocked until its work is done.
 * - Run queues per core (`migrate_s` > 0), as Linux keeps them: a rank waits for the core it last ran
 *   on (at first rank % C), first come first served among that core's ranks; a core with none of its
 *   own waiting takes over another's waiting rank only once that one has waited `migrate_s` (CFS's
 *   migration cost: a task that ran that recently is cache-hot and stays put), and the rank is then
 *   its. So bursts of a few microseconds queue behind their own core's work while the other core may
 *   idle (5 ranks on 2 cores: 3 on one, 2 on the other), and long copies still balance. With
 *   `migrate_s` = 0: one queue, and any free core runs any waiting rank.
 * - Time slices: with `slice_s`, work that has run for a slice goes to the back of the queue with what
 *   is left of it as soon as another rank waits for its core (round robin, as a time-sharing
 *   scheduler does); with nobody waiting it keeps its core.
 * - Switching: a core that goes on with another rank than the one it last ran first switches to it
 *   (`switch_s`: the context switch and the caches and TLB the other rank's state fills), so a rank
 *   that takes several messages in one turn pays one switch, and ranks taking turns pay one each.
 *   Where ranks sleep while they wait (`wake_s` > 0) only a rank woken from that sleep pays it: a
 *   sleeping transport's rank keeps its core until it blocks, so the sends it posts back to back (the
 *   scattered all-to-all's N-1) run in the one turn it was woken for, though the queue here serves
 *   them one request at a time; where ranks poll, yielding the core between polls, every turn is one.
 * - Waking: a rank that slept waiting for a message (`wake_s` > 0: its transport sleeps then) and finds
 *   its core idle starts `wake_s` later: an idle core has to be woken too (on a VM, the halted vCPU);
 *   on a busy core it only waits for its turn.
 * - Memory bandwidth: work has a CPU part (`fixed_s`, at full speed) and a memory-bound part (`mem_s`
 *   seconds alone, moving `demand` bytes/s of memory traffic alone). The memory-bound parts running at
 *   once share the machine's memory traffic (`memory_bytes_per_s`) by max-min fairness, as SimGrid's
 *   flow model shares a link: each gets its demand if the rest can have as much, else an equal share of
 *   what is left (water filling); its part then progresses at allocation / demand of full speed.
 *
 * The state changes only at an event: a request, or the earliest of the running activities' ends (of
 * the CPU part, of the whole, of a slice while someone waits, of a wait that makes a rank movable while
 * a core idles), posted as one EV_CORE event carrying a
 * generation number; any change of the running set posts a new one, and an older one is ignored. A
 * rank whose work ends is resumed by an EV_RESUME event at that instant. Deterministic: events run by
 * (time, posting order), the queue is first come first served, and cores are scanned in order.
 */
#include "sim.h"

#include <time.h>

#define EPS_S 1e-12 /* work left below a picosecond is done (the rounding of dt x speed) */

static inline double min2(double a, double b) { return b < a ? b : a; }

/* Bring the running activities' progress up to `now`. Between two events nothing changes phase (a
 * phase end is itself an event), so each part progresses at its speed over the whole interval. */
static void advance(SimNetwork *net, double now) {
    double dt = now - net->cpu_t;
    net->cpu_t = now;
    if (dt <= 0) return;
    for (int c = 0; c < net->num_cores; c++) {
        Activity *a = &net->running[c];
        if (a->rank < 0) continue;
        double left = dt;
        if (a->fixed_s > 0) {
            double used = min2(a->fixed_s, left);
            a->fixed_s -= used;
            left -= used;
        }
        if (left > 0 && a->mem_s > 0) a->mem_s -= left * a->speed;
        if (a->fixed_s < EPS_S) a->fixed_s = 0;
        if (a->mem_s < EPS_S) a->mem_s = 0;
        a->slice_left -= dt;
    }
}

/* Max-min shares of the memory traffic among the activities in their memory-bound part (water filling
 * in order of demand: playground/models/contention.py's `max_min_shares` is the same, in Python). */
static void share_memory(SimNetwork *net) {
    Activity **flows = net->flows;
    int k = 0;
    for (int c = 0; c < net->num_cores; c++) {
        Activity *a = &net->running[c];
        if (a->rank < 0) continue;
        a->speed = 1.0;
        if (a->fixed_s == 0 && a->mem_s > 0 && a->demand > 0 && net->memory_bytes_per_s > 0)
            flows[k++] = a;
    }
    for (int i = 1; i < k; i++) { /* by demand, ties in core order: insertion sort (k <= cores) */
        Activity *a = flows[i];
        int j = i - 1;
        while (j >= 0 && flows[j]->demand > a->demand) {
            flows[j + 1] = flows[j];
            j--;
        }
        flows[j + 1] = a;
    }
    double left = net->memory_bytes_per_s;
    for (int i = 0; i < k; i++) {
        double fair = left / (k - i);
        double got = min2(flows[i]->demand, fair);
        flows[i]->speed = got / flows[i]->demand;
        left -= got;
    }
}

/* Start waiting work on free cores, recompute the shares, and post the next EV_CORE. */
/* Take the queue's i-th waiting activity out of it. */
static Activity dequeue_at(SimNetwork *net, int i) {
    int n = net->num_ranks;
    Activity a = net->queue[(net->queue_head + i) % n];
    for (int j = i; j > 0; j--) /* close the gap: the ones before it move up one */
        net->queue[(net->queue_head + j) % n] = net->queue[(net->queue_head + j - 1) % n];
    net->queue_head = (net->queue_head + 1) % n;
    net->queue_len--;
    return a;
}

/* The first waiting activity idle core c may run at `now`, taken out of the queue: any one, or with
 * run queues per core one of its own ranks, else one that has waited `migrate_s` (it then moves
 * here, as an idle core pulls a task that is no longer cache-hot); 0 if none. */
static int take_waiting(SimNetwork *net, int c, double now, Activity *out) {
    int n = net->num_ranks, pick = -1;
    for (int i = 0; i < net->queue_len && pick < 0; i++)
        if (!net->per_core || net->home[net->queue[(net->queue_head + i) % n].rank] == c) pick = i;
    for (int i = 0; i < net->queue_len && pick < 0; i++)
        if (net->queue[(net->queue_head + i) % n].queued_t + net->migrate_s <= now + EPS_S) pick = i;
    if (pick < 0) return 0;
    *out = dequeue_at(net, pick);
    net->home[out->rank] = c;
    return 1;
}

/* Does one of core c's own ranks wait (its slice then ends on time)? */
static int waits_for(SimNetwork *net, int c) {
    if (!net->per_core) return net->queue_len > 0;
    for (int i = 0; i < net->queue_len; i++)
        if (net->home[net->queue[(net->queue_head + i) % net->num_ranks].rank] == c) return 1;
    return 0;
}

static int reschedule(SimEngine *e) {
    SimNetwork *net = e->net;
    for (int c = 0; c < net->num_cores && net->queue_len; c++) {
        if (net->running[c].rank >= 0) continue;
        if (!take_waiting(net, c, net->cpu_t, &net->running[c])) continue;
        net->running[c].slice_left = net->slice_s;
        int rank = net->running[c].rank;
        int polls = net->wake_s <= 0; /* its transport polls, yielding the core between polls */
        if (net->last_rank[c] >= 0 && net->last_rank[c] != rank && (polls || net->running[c].woke))
            net->running[c].fixed_s += net->switch_s;
        net->last_rank[c] = rank;
    }
    int idle = 0;
    for (int c = 0; c < net->num_cores && !idle; c++) idle = net->running[c].rank < 0;
    share_memory(net);
    double next = INFINITY;
    for (int c = 0; c < net->num_cores; c++) {
        Activity *a = &net->running[c];
        if (a->rank < 0) continue;
        double end = a->fixed_s > 0 ? a->fixed_s : a->mem_s / a->speed;
        if (net->slice_s > 0 && waits_for(net, c)) end = min2(end, a->slice_left > 0 ? a->slice_left : 0);
        next = min2(next, net->cpu_t + end);
    }
    if (net->per_core && idle) /* an idle core pulls a rank of another once it has waited migrate_s */
        for (int i = 0; i < net->queue_len; i++) {
            double t = net->queue[(net->queue_head + i) % net->num_ranks].queued_t + net->migrate_s;
            if (t > net->cpu_t) next = min2(next, t);
        }
    if (next == INFINITY) return 0;
    net->cpu_gen++;
    return sim_post_event(e, next, EV_CORE, -1, NULL, (double)net->cpu_gen);
}

int cpu_request(SimEngine *e, int rank) {
    SimNetwork *net = e->net;
    advance(net, e->now);
    double *req = &net->request[3 * rank];
    double fixed_s = req[0];
    int woke = net->asleep[rank];
    if (woke) { /* it slept: on an idle core it first has to be woken (the core too) */
        net->asleep[rank] = 0;
        int idle = 0;
        for (int c = 0; c < net->num_cores && !idle; c++)
            idle = net->running[c].rank < 0 && (!net->per_core || c == net->home[rank]);
        if (idle && !waits_for(net, net->home[rank])) fixed_s += net->wake_s;
    }
    int tail = (net->queue_head + net->queue_len) % net->num_ranks;
    net->queue[tail] = (Activity){rank, fixed_s, req[1], req[2], 0.0, 1.0, e->now, woke};
    net->queue_len++;
    return reschedule(e);
}

int cpu_update(SimEngine *e, double gen) {
    SimNetwork *net = e->net;
    if (gen != (double)net->cpu_gen) return 0; /* stale: the running set changed since it was posted */
    advance(net, e->now);
    for (int c = 0; c < net->num_cores; c++) {
        Activity *a = &net->running[c];
        if (a->rank < 0) continue;
        if (a->fixed_s == 0 && a->mem_s == 0) { /* done: the rank goes on from now */
            e->ranks[a->rank].t = e->now;
            if (sim_post_event(e, e->now, EV_RESUME, a->rank, NULL, 0.0) < 0) return -1;
            a->rank = -1;
        } else if (net->slice_s > 0 && a->slice_left <= EPS_S) {
            if (waits_for(net, c)) { /* its slice is over and someone waits: to the back of the queue */
                int tail = (net->queue_head + net->queue_len) % net->num_ranks;
                a->queued_t = e->now;
                net->queue[tail] = *a;
                net->queue_len++;
                a->rank = -1;
            } else {
                a->slice_left = net->slice_s;
            }
        }
    }
    return reschedule(e);
}

static inline double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void py_mark(SimNetwork *net, int rank) {
    if (net->python_scale > 0) net->py_mark[rank] = thread_cpu_s();
}

/* What one read of the thread's CPU clock costs (a system call on many machines: ~0.8 us on a VM):
 * each timed interval holds about one read, which is the timing's, not the rank's. Measured once. */
static double clock_read_s(void) {
    static double cost = -1.0;
    if (cost < 0) {
        enum { READS = 2000 };
        double t0 = thread_cpu_s();
        for (int i = 0; i < READS; i++) (void)thread_cpu_s();
        cost = (thread_cpu_s() - t0) / (READS + 1);
    }
    return cost;
}

void py_charge(SimNetwork *net, int rank) {
    if (net->python_scale <= 0) return;
    double now = thread_cpu_s();
    double ran = now - net->py_mark[rank] - clock_read_s();
    if (net->py_mark[rank] > 0 && ran > 0) net->py_owed[rank] += ran * net->python_scale;
    net->py_mark[rank] = now;
}

/* `rank` (running) asks for `fixed_s` of CPU work and `mem_s` of memory-bound work: 0 when it is done at
 * once (on its own CPU its clock just moves), 1 when it asked the scheduler at its time (an EV_CPU
 * event) and must now block until the work is done (sim_engine.c's `sim_work` blocks it), -1 on error. */
int cpu_ask(SimEngine *e, int rank, double fixed_s, double mem_s, double demand) {
    SimNetwork *net = e->net;
    if (net->python_scale > 0) { /* its own code since its last call runs first */
        fixed_s += net->py_owed[rank];
        net->py_owed[rank] = 0.0;
    }
    if (fixed_s + mem_s <= 0) return 0;
    if (!net->num_cores) {
        e->ranks[rank].t += fixed_s + mem_s;
        return 0;
    }
    double *req = &net->request[3 * rank];
    req[0] = fixed_s, req[1] = mem_s, req[2] = demand;
    return sim_post_event(e, e->ranks[rank].t, EV_CPU, rank, NULL, 0.0) < 0 ? -1 : 1;
}
