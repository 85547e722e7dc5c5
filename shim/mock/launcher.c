/* libmock_launcher{1,2}.so: a library that a program loads late and launches through
 * (a framework's extension, a kernel library loaded at first use): its own import slot
 * of cuLaunchKernelEx, which the shim's launch counter finds at the next poll after
 * the load. mock_workload --libs-after-ms loads the two copies at given times
 * (tests/test_launch_counter.py: periods whose counter grows in a row). */
#include <cuda.h>
#include <string.h>

__attribute__((visibility("default"))) CUresult mock_launcher_launch(CUfunction f, CUstream s, void **args)
{
    CUlaunchConfig c;
    memset(&c, 0, sizeof c);
    c.gridDimX = 4, c.gridDimY = c.gridDimZ = 1, c.blockDimX = 128, c.blockDimY = c.blockDimZ = 1, c.hStream = s;
    return cuLaunchKernelEx(&c, f, args, NULL);
}
