// base/fault.h: MICROPP_FAULT=rank:step:kind (testing): make rank `rank` fail at step `step` (1-based).
// Read once by cmd_train (train.c); the training loop asks fault_due / fault_step at the points each kind hits.
#pragma once
#include <stdint.h>

// nangrad: one gradient of the rank's first stage becomes NaN before the update (the loss stays finite);
// stall: the rank stops for good halfway through its action list (the watchdog must end the job);
// at step 0, in the set-up, before the first agreement of the run; late: the rank starts the step 2 s
// late, once (a slow first step on one rank: the others wait for it in their first collective); skip:
// every rank (whatever the rank given) leaves the step's update out, the synchronous run a step
// --post-validate undoes must equal (fault_due_any).
enum {
    FAULT_NONE, FAULT_ABORT, FAULT_NAN, FAULT_IO, FAULT_KILL, FAULT_ALLOC, FAULT_GRAD, FAULT_NANGRAD, FAULT_STALL,
    FAULT_LATE, FAULT_SKIP
};
void fault_init(void);                   // reads the variable; a malformed value is a user error
int fault_due(int kind, int64_t step);   // 1 when that fault is due on this rank at this step
int fault_due_any(int kind, int64_t step);  // 1 when that fault is due at this step, on whichever rank
void fault_step(int64_t step);           // at the start of a step: fires abort, kill or alloc
void fault_stall(int64_t step, const char *where);  // stall: the rank stops for good (the executor
                                                    // calls it halfway through its action list)
