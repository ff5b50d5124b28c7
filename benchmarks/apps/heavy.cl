// Heavy work-items (miniemu bounded emulation, issue #11): every work-item runs a loop of
// `iters` iterations (10^6 at the default size), and a launch-heavy LU factorisation.

// Integer compute: a linear congruential generator; out = (final state, sum of states).
__kernel void heavy_lcg(__global const uint *seed, __global uint *out, int iters) {
  int i = get_global_id(0);
  uint x = seed[i], s = 0u;
  for (int k = 0; k < iters; ++k) {
    x = x * 1664525u + 1013904223u;
    s += x;
  }
  out[2 * i] = x;
  out[2 * i + 1] = s;
}

// Global-memory gather: an odd stride walks a power-of-two table (mask = size - 1).
__kernel void heavy_gather(__global const uint *table, __global uint *out, int iters,
                           uint stride, uint mask) {
  uint i = get_global_id(0);
  uint acc = 0u;
  for (int k = 0; k < iters; ++k) acc += table[(i + (uint)k * stride) & mask];
  out[i] = acc;
}

// fp32 FMA chain converging to a fixed point (x* = 2b, y* = 8b/3).
__kernel void heavy_fma(__global const float *b, __global float *out, int iters) {
  int i = get_global_id(0);
  float bi = b[i], x = 0.0f, y = 0.0f;
  for (int k = 0; k < iters; ++k) {
    x = fma(x, 0.5f, bi);
    y = fma(y, 0.25f, x);
  }
  out[i] = y;
}

// Special functions: fixed-point iterations x = cos(a x), y = sqrt(y + x).
__kernel void heavy_special(__global const float *a, __global float *out, int iters) {
  int i = get_global_id(0);
  float ai = a[i], x = 0.5f, y = 1.0f;
  for (int k = 0; k < iters; ++k) {
    x = cos(ai * x);
    y = sqrt(y + x);
  }
  out[2 * i] = x;
  out[2 * i + 1] = y;
}

// Local memory behind a barrier: each work-item walks its group's tile with an odd stride.
__kernel void heavy_lmem(__global const uint *in, __global uint *out, __local uint *tile,
                         int iters, uint stride) {
  uint lid = get_local_id(0), gid = get_global_id(0), n = get_local_size(0);
  tile[lid] = in[gid];
  barrier(CLK_LOCAL_MEM_FENCE);
  uint acc = 0u;
  for (int k = 0; k < iters; ++k) acc += tile[(lid + (uint)k * stride) & (n - 1)];
  out[gid] = acc;
}

// LU factorisation without pivoting, one pivot per launch pair (row-major n x n).
__kernel void lu_column(__global float *a, int n, int k) {
  int i = k + 1 + get_global_id(0);
  if (i < n) a[i * n + k] /= a[k * n + k];
}

__kernel void lu_update(__global float *a, int n, int k) {
  int j = k + 1 + get_global_id(0);
  int i = k + 1 + get_global_id(1);
  if (j < n) a[i * n + j] -= a[i * n + k] * a[k * n + j];
}
