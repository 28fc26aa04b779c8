#!/bin/bash
# configs/slurm-job.sh: a micropp training job for Slurm (docs/slurm.md). Submit it from the folder
# that holds ./micropp, with train's options after the script's name, and never --save, --save-every
# or --resume (the job sets them):
#   sbatch configs/slurm-job.sh --config configs/pipeline.json --steps 1000
#   sbatch --nodes=1 --ntasks-per-node=4 configs/slurm-job.sh --mode hybrid --pp 2 --dp 2
# One task per rank, started by srun with the PMI-2 launch MPICH speaks. The job checkpoints every
# SAVE_EVERY steps into CKPT; a requeued job (scontrol requeue, a node that failed), or the same job
# submitted again under the same name, resumes from the last checkpoint, and --steps stays the total.
#SBATCH --job-name=micropp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=01:00:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=micropp-%x-%j.out
set -u
MICROPP=${MICROPP:-./micropp}
CKPT=${CKPT:-checkpoints/$SLURM_JOB_NAME}
SAVE_EVERY=${SAVE_EVERY:-100}
resume=()
[ -f "$CKPT/manifest.json" ] && resume=(--resume "$CKPT")
echo "micropp job $SLURM_JOB_ID ($SLURM_JOB_NAME), restart ${SLURM_RESTART_COUNT:-0}: ${resume[*]:-a fresh start}, saving to $CKPT every $SAVE_EVERY steps"
# --mpi=pmi2: without it (Slurm's default is none) each task is an MPI world of its own.
# --kill-on-bad-exit=1: a rank that fails ends the step at once (micropp's guard does it otherwise).
exec srun --mpi=pmi2 --kill-on-bad-exit=1 "$MICROPP" train "$@" --save "$CKPT" --save-every "$SAVE_EVERY" "${resume[@]}"
