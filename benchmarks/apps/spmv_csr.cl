/* y = A x for a CSR sparse matrix, one row per work-item (the "scalar" kernel):
 * irregular row lengths and gathers from x. */
__kernel void spmv_csr(__global const uint *row_ptr, __global const uint *cols,
                       __global const float *vals, __global const float *x, __global float *y,
                       const uint nrows)
{
    const uint row = get_global_id(0);
    if (row >= nrows)
        return;
    float acc = 0.0f;
    for (uint j = row_ptr[row]; j < row_ptr[row + 1u]; ++j)
        acc += vals[j] * x[cols[j]];
    y[row] = acc;
}
