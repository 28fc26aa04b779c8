// finalize.c: an MPI_Finalize that ends over TCP. It owns one work-around for MPICH 4.0.2 (Debian 12)
// over UCX: the disconnect of every endpoint is skipped, and the worker's destruction closes them.
#include <stddef.h>

// MPICH 4.0.2's UCX finalize disconnects every endpoint, waits for each disconnect to complete, then
// enters the PMI barrier, where it no longer drives UCX. Over UCX's TCP transport a disconnect needs
// the peer's progress, so a rank that finished its own disconnects and sleeps in the barrier leaves a
// slower peer spinning for ever (measured: 4 ranks in two network namespaces, a program that only
// calls MPI_Init, MPI_Allreduce and MPI_Finalize hung in 3 of 15 runs, and in 12 of 15 once every
// pair of ranks had exchanged a message; with this file, 0 of 15. pmodels/mpich#6596 removed the
// barrier in MPICH 4.2). MPICH calls ucp_disconnect_nb only there, and by then MPI's rules have every message
// delivered, so answering "done" at once loses nothing: ucp_worker_destroy, called next, closes the
// endpoints without asking the peers. The linker exports this definition, so libmpich's call comes
// here; where MPICH runs over another transport (OFI, or no UCX at all) nothing ever calls it.
void *ucp_disconnect_nb(void *ep);
void *ucp_disconnect_nb(void *ep) {
    (void)ep;
    return NULL;  // UCS_OK: completed
}
