// tests/unit_slurm.c: slurm.c's reading of the environment, without a cluster: the header's job line
// and its JSON object for srun, mpiexec inside a job, a requeued job and no job at all; the refusal
// of tasks that MPI sees as singletons (in a child: it exits), and when it stays silent.
#include <stdlib.h>
#include <sys/wait.h>
#include "unit.h"
#include "comms/slurm.h"

static const char *const VARS[] = {"SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS",
                                   "SLURM_NTASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES",
                                   "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_RESTART_COUNT",
                                   "SLURM_PROCID", "HYDI_CONTROL_FD", "MPI_LOCALNRANKS"};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++) unsetenv(VARS[i]);
}

// A task of `srun -N 2 -n 4` in job 12 named pp.
static void srun_env(void) {
    clear_env();
    setenv("SLURM_JOB_ID", "12", 1);
    setenv("SLURM_JOB_NAME", "pp", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_STEP_NODELIST", "n[1-2]", 1);
    setenv("SLURM_STEP_NUM_NODES", "2", 1);
    setenv("SLURM_JOB_NODELIST", "n[1-3]", 1);
    setenv("SLURM_JOB_NUM_NODES", "3", 1);
    setenv("SLURM_PROCID", "1", 1);
}

static void expect_line(const char *name, const char *want) {
    char b[600];
    int got = slurm_describe(b, sizeof b);
    EXPECT(name, got == 1 && !strcmp(b, want), "returned %d, '%s', expected '%s'", got, b, want);
}

static void test_describe(void) {
    char b[600] = "x";
    clear_env();
    EXPECT("slurm/describe: outside a job, nothing", slurm_describe(b, sizeof b) == 0 && !b[0] && !slurm_json(),
           "'%s'", b);
    srun_env();
    expect_line("slurm/describe: a task of srun", "slurm job 12 (pp) step 0 by srun | 4 tasks on 2 nodes n[1-2]");
    setenv("SLURM_RESTART_COUNT", "1", 1);
    expect_line("slurm/describe: a requeued job says so",
                "slurm job 12 (pp) step 0 by srun | 4 tasks on 2 nodes n[1-2] | restart 1 (requeued)");
    setenv("SLURM_RESTART_COUNT", "4294967297", 1);  // past int: no restart count (issue 37: atoi made it 1)
    expect_line("slurm/describe: a restart count past int's range is left out",
                "slurm job 12 (pp) step 0 by srun | 4 tasks on 2 nodes n[1-2]");
    setenv("HYDI_CONTROL_FD", "7", 1);  // mpiexec in a job: its proxies' step holds the ranks
    unsetenv("SLURM_RESTART_COUNT");
    expect_line("slurm/describe: ranks of mpiexec inside a job",
                "slurm job 12 (pp) | ranks started by mpiexec on 2 nodes n[1-2]");
    unsetenv("HYDI_CONTROL_FD");
    unsetenv("SLURM_STEP_ID");  // the batch script itself: the job's nodes
    unsetenv("SLURM_STEP_NODELIST");
    unsetenv("SLURM_STEP_NUM_NODES");
    expect_line("slurm/describe: outside a step, the job's nodes", "slurm job 12 (pp) | on 3 nodes n[1-3]");

    // A node list longer than the buffer is cut short, inside it.
    srun_env();
    char nodes[2000];
    memset(nodes, 'n', sizeof nodes - 1);
    nodes[sizeof nodes - 1] = 0;
    setenv("SLURM_STEP_NODELIST", nodes, 1);
    char small[64];
    memset(small, '#', sizeof small);
    int got = slurm_describe(small, 48);
    EXPECT("slurm/describe: a long node list is cut at the buffer's end",
           got == 1 && strlen(small) == 47 && small[48] == '#' && small[63] == '#',
           "returned %d, %zu chars", got, strlen(small));
}

static void test_json(void) {
    srun_env();
    setenv("SLURM_RESTART_COUNT", "2", 1);
    cJSON *o = slurm_json();
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    const char *want = "{\"job_id\":\"12\",\"job_name\":\"pp\",\"step_id\":\"0\",\"launcher\":\"srun\",\"tasks\":4,"
                       "\"nodes\":\"n[1-2]\",\"num_nodes\":2,\"restart_count\":2}";
    EXPECT("slurm/json: a task of srun, requeued twice", t && !strcmp(t, want), "'%s', expected '%s'",
           t ? t : "(null)", want);
    free(t);
    cJSON_Delete(o);
}

// slurm_check_launch in a child: its exit status and what it wrote on stderr.
static int check_in_child(int world_size, char *err, size_t n) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        slurm_check_launch("train", world_size);
        _exit(0);
    }
    close(fd[1]);
    size_t k = 0;
    ssize_t r;
    while (k + 1 < n && (r = read(fd[0], err + k, n - 1 - k)) > 0) k += (size_t)r;
    err[k] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_check_launch(void) {
    char err[1000];
    srun_env();  // task 1 of 4, MPI sees a world of 1: exits 2, silent (task 0 speaks)
    int rc = check_in_child(1, err, sizeof err);
    EXPECT("slurm/launch: a singleton task of 4 (not task 0) exits 2 in silence", rc == 2 && !err[0],
           "exit %d, '%s'", rc, err);
    setenv("SLURM_PROCID", "0", 1);
    rc = check_in_child(1, err, sizeof err);
    const char *want = "micropp: train: srun started 4 tasks, but MPI sees each as a world of 1 rank (Slurm's "
                       "--mpi=none, its default unless slurm.conf sets MpiDefault): start it with 'srun --mpi=pmi2 "
                       "...' (or export SLURM_MPI_TYPE=pmi2)\n";
    EXPECT("slurm/launch: task 0 of 4 singletons says srun --mpi=pmi2 in one line, exit 2",
           rc == 2 && !strcmp(err, want), "exit %d, '%s'", rc, err);
    rc = check_in_child(4, err, sizeof err);
    EXPECT("slurm/launch: 4 tasks in a world of 4 go on", rc == 0 && !err[0], "exit %d, '%s'", rc, err);
    setenv("SLURM_STEP_NUM_TASKS", "1", 1);
    setenv("SLURM_NTASKS", "1", 1);
    rc = check_in_child(1, err, sizeof err);
    EXPECT("slurm/launch: srun -n 1 goes on", rc == 0 && !err[0], "exit %d, '%s'", rc, err);
    srun_env();
    setenv("HYDI_CONTROL_FD", "7", 1);  // mpiexec's singleton inside a job of 4 tasks: not srun's launch
    rc = check_in_child(1, err, sizeof err);
    EXPECT("slurm/launch: a process of mpiexec inside a job goes on", rc == 0 && !err[0], "exit %d, '%s'", rc, err);
    clear_env();
    rc = check_in_child(1, err, sizeof err);
    EXPECT("slurm/launch: outside Slurm, goes on", rc == 0 && !err[0], "exit %d, '%s'", rc, err);
}

int main(void) {
    test_describe();
    test_json();
    test_check_launch();
    return unit_failures != 0;
}
