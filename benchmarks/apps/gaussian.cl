/* Rodinia-style Gaussian elimination steps: the work of Fan1/Fan2 shrinks with the step t,
 * a scalar argument, while the NDRange stays constant (miniemu.reuse's scalar axis). */
__kernel void Fan1(__global float *m, __global const float *a, const int size, const int t) {
  int g = get_global_id(0);
  if (g >= size - 1 - t) return;
  m[size * (g + t + 1) + t] = a[size * (g + t + 1) + t] / a[size * t + t];
}
__kernel void Fan2(__global const float *m, __global float *a, __global float *b,
                   const int size, const int t) {
  int x = get_global_id(0), y = get_global_id(1);
  if (x < size - 1 - t && y < size - t) {
    a[size * (x + 1 + t) + (y + t)] -= m[size * (x + 1 + t) + t] * a[size * t + (y + t)];
    if (y == 0) b[x + 1 + t] -= m[size * (x + 1 + t) + (y + t)] * b[t];
  }
}
