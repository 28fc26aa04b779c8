// slurm.h: micropp under Slurm. What the environment says about the job (srun started the ranks, or
// mpiexec inside a job), the launch mistake micropp can see (tasks that MPI sees as singletons), the
// guard that ends the job step when a rank dies without a word, and the job's line in the header.
#pragma once
#include <stddef.h>
#include <cjson/cJSON.h>

// Before MPI_Init (comm_init): when srun started this process as one task of several, forks a small
// guard process that watches it. Should this process end without slurm_guard_release (SIGKILL, a
// crash, the OOM killer), the guard says so in one line and ends the job step with scancel, as srun
// --kill-on-bad-exit=1 would: by default Slurm keeps the other tasks running, and they would wait for
// the dead rank until --timeout. Nothing happens outside srun.
void slurm_guard_start(void);
// This process ends on purpose, having said why (exit, _exit): the guard leaves quietly.
// Async-signal-safe; registered with atexit, and called before each _exit.
void slurm_guard_release(void);
// Before each MPI_Abort (this process has said why): under srun the abort ends the job step, the guard
// with it; should this process end and the step not, the guard ends it, naming MPI_Abort. Async-signal-safe.
void slurm_guard_aborting(void);

// Right after MPI_Init (comm_init), on every process: srun started several tasks but MPI sees each as
// a world of 1 (srun --mpi=none, Slurm's default, or an MPI that does not speak the launch's PMI):
// one line naming srun --mpi=pmi2 and exit 2, the same decision in every task (task 0 speaks).
void slurm_check_launch(const char *cmd, int world_size);

// The job as rank 0's environment describes it, for the header: "slurm job 12 (pp) step 0 by srun |
// 4 tasks on 2 nodes n[1-2]" (and "| restart 1" once requeued). Returns 0, b empty, outside Slurm.
int slurm_describe(char *b, size_t n);
// The same as a JSON object (job_id, job_name, step_id, launcher, tasks, nodes, num_nodes,
// restart_count), or NULL outside Slurm.
cJSON *slurm_json(void);
