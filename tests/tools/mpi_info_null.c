/* Preloaded into Debian's NPopenmpi2 by tests/tools/mpi_view.py: NetPIPE's mpi2.c calls
 * MPI_Win_create(buf, len, 1, NULL, MPI_COMM_WORLD, &win), NULL where MPI_INFO_NULL is meant.
 * Open MPI's MPI_INFO_NULL is a real object (&ompi_mpi_info_null), so it rejects the call with
 * MPI_ERR_INFO, on shared memory as well; with mpi_param_check 0 it crashes instead. This passes
 * MPI_INFO_NULL for NULL and changes nothing else. The symbols are looked up when called, so
 * the library also loads into mpirun and orted, which do not link libmpi. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

typedef int (*win_create_fn)(void *, long, int, void *, void *, void *);

int MPI_Win_create(void *base, long size, int disp_unit, void *info, void *comm, void *win)
{
    win_create_fn real = (win_create_fn)dlsym(RTLD_DEFAULT, "PMPI_Win_create");
    if (info == NULL)
        info = dlsym(RTLD_DEFAULT, "ompi_mpi_info_null");
    return real(base, size, disp_unit, info, comm, win);
}
