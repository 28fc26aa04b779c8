// comms.c: MPI's lifecycle underneath comms.h: init (the exit hooks of base/util.c, so fatal() aborts
// every rank and user_error() finalizes them together), the bounded finalize, the world, the grid of
// stage x replica communicators, and the NCCL transport opened over the world (closed at finalize).
#include <string.h>
#include <unistd.h>
#include "comms.h"
#include "comms/devcomm.h"
#include "comms/launch.h"
#include "comms/slurm.h"
#include "p2p.h"
#include "base/util.h"
#include "comms/watchdog.h"

static int mpi_up(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

// MPI_Abort tells mpiexec through this node's proxy; over a link that is down it can block, so an
// alarm ends this rank regardless (SIGALRM's default action).
static void abort_world(void) { slurm_guard_aborting(); alarm(5); MPI_Abort(MPI_COMM_WORLD, 1); }
static void finalize_mpi(void) { wd_close(); wd_finalize_bound(2); MPI_Finalize(); }
static void agree_world(const char *err, int code) { comm_agree_code(MPI_COMM_WORLD, err, code); }

void comm_device_wait(int (*ready)(void *ctx), void *ctx, int peer, const char *what) {
    wd_poll(ready, ctx, (WdSpin){.peer = peer, .what = what, .device = 1});  // (the GPU's: the active policy's)
}

void comm_init(int *argc, char ***argv) {
    int provided;
    // under srun: a rank that dies without a word ends the job step (its guard is forked before MPI starts)
    slurm_guard_start();
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    g_quiet_errors = 1;
    util_set_exit_hooks(&(ExitHooks){.running = mpi_up,
                                     .world_size = comm_world_size,
                                     .abort_job = abort_world,
                                     .finalize_quick = finalize_mpi,
                                     .finalize = comm_finalize_with,
                                     .agree = agree_world});
    // srun --mpi=none: tasks that MPI sees as singletons, refused by each on its own
    slurm_check_launch(argc && argv && *argc > 0 ? (*argv)[0] : "", comm_world_size());
    // the first message: every rank was started alike
    launch_agree_argv(argc && argv ? *argc : 0, argc && argv ? *argv : NULL);
    wd_init();
    backend_cuda_set_wait(comm_device_wait, wd_mark_call);  // the GPU's waits under --timeout too
}

// NCCL communicators, closed by comm_finalize (in this order on every rank): the pipeline's
// transport, then the groups' in the order opened (the tensor-parallel group's, or the expert lanes').
enum { DEVCOMM_PIPELINE, DEVCOMM_GROUP, DEVCOMM_SLOTS = 4 };
static DevComm *opened_devcomm[DEVCOMM_SLOTS];
static void abort_devcomm(void) { devcomm_abort_all(opened_devcomm, DEVCOMM_SLOTS); }  // the watchdog ends the job
static void keep_devcomm(int which, DevComm *d) {
    while (which > DEVCOMM_PIPELINE && which < DEVCOMM_SLOTS && opened_devcomm[which]) which++;  // a group's: the next
    CHECK(which < DEVCOMM_SLOTS && !opened_devcomm[which], "%s",
          which ? "more NCCL groups than comms.c keeps" : "a second NCCL communicator for the pipeline");
    opened_devcomm[which] = d;
    wd_at_end(abort_devcomm);  // a rank that times out leaves no NCCL kernel spinning on a peer
}
static int outputs_agreed;       // comm_outputs_written ran

int comm_outputs_written(int code, const char *what) {
    outputs_agreed = 1;
    if (!mpi_up() || comm_world_size() == 1) return code;
    MPI_Request q;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &q));
    if (g_rank == 0) wd_wait_all(&q, MPI_COMM_WORLD, "the end of the run");
    else wd_wait(&q, NULL, 0, what);  // rank 0 arrives once its outputs are written
    return code;
}

void comm_finalize_with(int code) {
    for (int i = 0; i < DEVCOMM_SLOTS; i++)
        if (opened_devcomm[i]) { devcomm_close(opened_devcomm[i]); opened_devcomm[i] = NULL; }
    comm_messages_free();  // the wire's pinned staging, then the CUDA backend itself (no-op if not opened)
    comm_collectives_free();
    backend_cuda_close();
    if (!mpi_up()) return;
    if (!outputs_agreed)
        code = comm_outputs_written(code, "writing its output: a slow terminal or pipe? raise --timeout");
    wd_close();
    wd_finalize_bound(code);  // the results are out: a finalize that does not return must not keep the job
    MPI_Finalize();
}
void comm_finalize(void) { comm_finalize_with(0); }
int comm_world_rank(void) { int r = 0; if (mpi_up()) MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
int comm_world_size(void) { int n = 1; if (mpi_up()) MPI_Comm_size(MPI_COMM_WORLD, &n); return n; }

void comm_grid(Comm *c, const Backend *be, int P, int D, int placement) { comm_grid_tp(c, be, P, D, 1, placement); }

// The communicator of MPI_Comm_split(parent, color[me], key[me]) (comms.h), by MPI_Comm_create_group among the
// ranks of that color alone. A split's collectives span the whole parent and spin there (measured, 4 ranks on
// 2 cores: a grid's three splits 0.15 s of CPU in all, the groups' own 0.02 s).
MPI_Comm comm_split_known(MPI_Comm parent, const int *color, const int *key, int tag) {
    int size, me, n = 0;
    MPI_CHECK(MPI_Comm_size(parent, &size));
    MPI_CHECK(MPI_Comm_rank(parent, &me));
    int *member = xmalloc(sizeof(int) * (size_t)size);
    for (int r = 0; r < size; r++)
        if (color[r] == color[me]) member[n++] = r;
    for (int i = 1; i < n; i++)  // by key, stable (insertion)
        for (int j = i; j > 0 && key[member[j - 1]] > key[member[j]]; j--) {
            int t = member[j];
            member[j] = member[j - 1];
            member[j - 1] = t;
        }
    MPI_Group all, group;
    MPI_Comm out;
    MPI_CHECK(MPI_Comm_group(parent, &all));
    MPI_CHECK(MPI_Group_incl(all, n, member, &group));
    MPI_CHECK(MPI_Comm_create_group(parent, group, tag, &out));
    MPI_CHECK(MPI_Group_free(&group));
    MPI_CHECK(MPI_Group_free(&all));
    free(member);
    return out;
}

void comm_grid_tp(Comm *c, const Backend *be, int P, int D, int T, int placement) {
    memset(c, 0, sizeof *c);
    c->be = be;
    c->world = MPI_COMM_WORLD;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    CHECK(P >= 1 && D >= 1 && T >= 1 && P * D * T == c->size,
          "grid of %d stages x %d replicas x %d tensor-parallel on %d ranks", P, D, T, c->size);
    c->stages = P;
    c->replicas = D;
    c->tp_size = T;
    c->tp_rank = comm_rank_tp(T, c->rank);
    int g = comm_rank_group(T, c->rank);
    c->placement = placement == PLACEMENT_REPLICAS ? PLACEMENT_REPLICAS : PLACEMENT_STAGES;
    c->stage = comm_grid_stage(c->placement, P, D, g);
    c->replica = comm_grid_replica(c->placement, P, D, g);
    // split(color, key): pp gathers one replica's stages in stage order, dp one stage's replicas (each
    // of the same tp_rank), tp one group's ranks.
    int n = c->size, *at = xmalloc(sizeof(int) * 6 * (size_t)n), *stage = at, *replica = at + n, *tp = at + 2 * n;
    int *pp_color = at + 3 * n, *dp_color = at + 4 * n, *group = at + 5 * n;
    for (int r = 0; r < n; r++) {
        group[r] = comm_rank_group(T, r);
        tp[r] = comm_rank_tp(T, r);
        stage[r] = comm_grid_stage(c->placement, P, D, group[r]);
        replica[r] = comm_grid_replica(c->placement, P, D, group[r]);
        pp_color[r] = replica[r] * T + tp[r];
        dp_color[r] = stage[r] * T + tp[r];
    }
    c->pp = comm_split_known(MPI_COMM_WORLD, pp_color, stage, 1);
    c->dp = comm_split_known(MPI_COMM_WORLD, dp_color, replica, 2);
    c->tp = comm_split_known(MPI_COMM_WORLD, group, tp, 3);
    free(at);
    MPI_Comm_set_errhandler(c->pp, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(c->dp, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(c->tp, MPI_ERRORS_RETURN);
    c->prev = c->stage > 0 ? comm_stage_rank(c, c->stage - 1) : MPI_PROC_NULL;
    c->next = c->stage < c->stages - 1 ? comm_stage_rank(c, c->stage + 1) : MPI_PROC_NULL;
}

void comm_pipeline(Comm *c, const Backend *be) { comm_grid(c, be, comm_world_size(), 1, PLACEMENT_STAGES); }

void comm_free(Comm *c) {
    if (!mpi_up()) return;
    comm_shared_free(c);
    if (c->pp != MPI_COMM_NULL && c->pp) MPI_Comm_free(&c->pp);
    if (c->dp != MPI_COMM_NULL && c->dp) MPI_Comm_free(&c->dp);
    if (c->tp != MPI_COMM_NULL && c->tp) MPI_Comm_free(&c->tp);
}

// The id of a communicator over comm: made by its rank 0, broadcast to the others.
static void nccl_id(MPI_Comm comm, char id[DEVCOMM_ID_BYTES], int *rank, int *size) {
    MPI_CHECK(MPI_Comm_rank(comm, rank));
    MPI_CHECK(MPI_Comm_size(comm, size));
    char why[400];
    if (p2p_nccl_env(why, sizeof why) && *rank == 0) fprintf(stderr, "micropp: %s\n", why);  // before any NCCL call
    if (*rank == 0) devcomm_unique_id(id);
    MPI_CHECK(MPI_Bcast(id, DEVCOMM_ID_BYTES, MPI_BYTE, 0, comm));
}

DevComm *comm_nccl_open(MPI_Comm comm, const int *peers, int npeers) {
    int rank, size;
    char id[DEVCOMM_ID_BYTES];
    nccl_id(comm, id, &rank, &size);
    return devcomm_open(id, size, rank, peers, npeers);
}

DevComm *comm_nccl_group(MPI_Comm comm) {
    int rank, size;
    char id[DEVCOMM_ID_BYTES];
    nccl_id(comm, id, &rank, &size);
    DevComm *d = devcomm_open_group(id, size, rank);
    keep_devcomm(DEVCOMM_GROUP, d);
    return d;
}

void comm_use_transport(Comm *c, int transport, const int *peers, int npeers) {
    c->transport = transport;
    if (transport == TRANSPORT_NCCL && c->size > 1 && !c->dev) {
        CHECK(!c->be->on_host, "the NCCL transport with the %s backend", c->be->name);
        c->dev = comm_nccl_open(c->world, peers, npeers);  // peers are then world ranks, as for MPI
        keep_devcomm(DEVCOMM_PIPELINE, c->dev);
    }
}
