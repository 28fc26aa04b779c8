// watchdog.h: no wait lasts forever. --timeout bounds every wait of this rank (receives, sends waited
// on, collectives, barriers, shm hand-offs, MPI_Finalize); SIGINT/SIGTERM end every rank with one
// line. The executor says which action it is in, so the line that ends a stalled job can name it.
#pragma once
#include <mpi.h>

// What this rank is doing: an action of its schedule (what = "F", "RECV_ACT", ...; stage, virtual
// stage, micro-batch, chunk), or a phase of the step loop ("the loss all-reduce"; those fields -1).
// step is 1-based, 0 outside the steps, -1 in evaluation. Setting it costs a struct copy (the executor does it
// around every action).
typedef struct { const char *what; int stage, vstage, mb, chunk, step; } WdAction;
extern WdAction wd_current, wd_last;  // what this rank is in, and the last it completed
static inline void wd_begin(WdAction a) { wd_current = a; }
static inline void wd_end(void) { wd_last = wd_current; wd_current.what = 0; }
static inline void wd_phase(const char *what, int step) { wd_current = (WdAction){what, -1, -1, -1, -1, step}; }

#define WD_DEFAULT_TIMEOUT 300.0
// The shortest bound --timeout takes (0, no bound, aside): a healthy run waits about that long at
// times (the first step, a checkpoint another rank writes, a time slice lost on a loaded machine).
#define WD_MIN_TIMEOUT 1.0
// After MPI_Init, on every rank: the control channel (a duplicate of the world on which a rank whose
// wait ran out tells the others), the signal handlers and the backstop thread. Collective.
void wd_init(void);
// One process without MPI (selftest): the backstop thread alone, so --timeout bounds its device waits
// (wd_poll: the line, the wd_at_end hook, exit 1) and its marked library calls (exit 1) the same way.
void wd_init_local(void);
void wd_set_timeout(double seconds);  // 0: waits are not bounded
double wd_timeout(void);

// MPI_Wait, bounded: waits for req (a receive from or send to `peer`, or a collective when peer is
// -1) polling, as MPI_Wait spins. `what` names the wait in the watchdog's line.
// When --timeout runs out: the line, every other rank told, the job ended (exit 1).
void wd_wait(MPI_Request *req, MPI_Status *st, int peer, const char *what);
// The same for a collective over comm: when it runs out, the line also names the ranks of comm that
// have not arrived, and what each is doing (asked over the control channel; a rank that does not
// answer within a second is stopped, busy outside MPI, or gone). wd_wait(.., -1, ..) asks the world.
void wd_wait_all(MPI_Request *req, MPI_Comm comm, const char *what);
// A spin loop of our own (the shm all-reduce, comm_wait): call wd_spin once per turn; it fires as
// wd_wait does once the loop has lasted --timeout. Start each wait with a zeroed WdSpin; comm: the
// collective's communicator (NULL: the world), as for wd_wait_all.
// device: a wait on the GPU (comm_device_wait), which keeps the active policy's waits under any policy.
typedef struct { double t0; int peer; const char *what; unsigned turns; const MPI_Comm *comm; int device; } WdSpin;
void wd_spin(WdSpin *s);
// How a waiting rank waits, the wait policy (--wait-policy, else MICROPP_WAIT_POLICY, else active):
// active spins as MPI_Wait does, yielding the core every turn where a node has more ranks than cores
// (the rank waited for may need this very core; measured: 4 ranks on 2 cores ran a 20-step pipeline in
// a quarter of the time and a fifth of the CPU); passive yields for 16 turns, then sleeps 50 us a turn,
// for a machine whose cores other jobs want too (a yielding rank still takes its share of a core every
// turn; measured under a load of 27 on 2 cores, a 4-rank ZeRO-3 run took a quarter of the CPU and of
// the time); auto is passive where a node has more ranks than cores, else active. What is computed
// does not change, only how the core is spent while nothing arrives. MICROPP_WAIT=spin, yield or sleep
// overrides any policy (the tests' timings). wd_wait_mode: WAIT_SPIN, WAIT_YIELD or WAIT_SLEEP, -1 when
// setting (MICROPP_WAIT; NULL or "": unset) is none of those. wd_wait_policy_parse: WAIT_ACTIVE,
// WAIT_PASSIVE or WAIT_AUTO for the word, else -1. wd_crowded: whether ranks_here outnumber the cores
// this process may run on (sched_getaffinity). wd_share_cores applies the policy, crowded_node saying
// whether some node has more ranks than cores (comm_choose_hardware's, alike on every rank); a bad
// MICROPP_WAIT or MICROPP_WAIT_POLICY is refused (exit 2, alike on every rank: mpiexec passes one
// environment). wd_set_wait_policy: the option's policy, over the environment's.
#define WAIT_POLICY_CHOICES "active|passive|auto"
enum { WAIT_ACTIVE, WAIT_PASSIVE, WAIT_AUTO };
enum { WAIT_SPIN, WAIT_YIELD, WAIT_SLEEP };
int wd_wait_mode(const char *setting, int policy, int crowded_node);
int wd_wait_policy_parse(const char *word);
int wd_crowded(long ranks_here);
void wd_share_cores(int crowded_node);
void wd_set_wait_policy(int policy);
// The waits decided (for the summary): the policy, the mode, whether a node is crowded, this rank's
// node's ranks and cores, what chose the policy, MICROPP_WAIT's word (NULL: unset). Returns whether
// anything chose them (the option or an environment variable).
enum { WAITS_DEFAULT, WAITS_FROM_OPTION, WAITS_FROM_ENV };
typedef struct { int policy, mode, crowded, from; long ranks, cores; const char *override; } WdWaits;
int wd_waits(WdWaits *w);
// The spin loop itself, for a wait on something MPI does not see (a collective in flight, the GPU's
// queue, an NCCL event): calls ready(ctx) until it returns nonzero, under --timeout as wd_wait, the
// line naming s.what, s.peer (WD_LOCAL: this rank's own device, no peer) and the action it is in.
// ready may yield the core itself. Start with s's t0 and turns zero.
#define WD_LOCAL (-2)
void wd_poll(int (*ready)(void *ctx), void *ctx, WdSpin s);
// Called once when this rank's watchdog fires or another rank's tells it to end, before the job ends
// (the NCCL transport aborts its communicators: ncclCommAbort, so no kernel is left spinning). The
// alarm is set before it: a hook that does not return within 5 s ends this rank by SIGALRM.
void wd_at_end(void (*fn)(void));

// MPI_CHECK marks every MPI call, so the backstop thread sees one that blocks past --timeout (a
// blocking call that no poll loop wraps: MPI_Comm_split, MPI_Comm_split_type, ...): it then
// prints the call and ends the job. Two relaxed stores per call.
extern unsigned wd_calls;
extern const char *wd_call;
static inline void wd_call_enter(const char *call) {
    __atomic_store_n(&wd_call, call, __ATOMIC_RELAXED);
    __atomic_add_fetch(&wd_calls, 1, __ATOMIC_RELAXED);
}
static inline void wd_call_leave(void) { __atomic_store_n(&wd_call, (const char *)0, __ATOMIC_RELAXED); }
// The same as a function, for the CUDA backend's blocking library calls (ncclCommInitRank, cudaFree,
// ...: base/ops.h's DeviceCall): call names the call as it begins, NULL when it has returned.
void wd_mark_call(const char *call);
// Every MPI call: marked for the backstop thread while it runs, and its error (MPI_ERRORS_RETURN is
// set) ends the job with "[rank r] file:line: CALL failed: MPI's words".
void mpi_check_at(int err, const char *what, const char *file, int line);
#define MPI_CHECK(call) (wd_call_enter(#call), mpi_check_at((call), #call, __FILE__, __LINE__), wd_call_leave())

// Before MPI_Finalize (results written and flushed): if it has not returned within a few seconds
// (MPICH 4.0.2 over TCP sometimes blocks in it), the process exits with `code` anyway.
void wd_finalize_bound(int code);
void wd_close(void);  // cancels the control channel's receive (before MPI_Finalize)
