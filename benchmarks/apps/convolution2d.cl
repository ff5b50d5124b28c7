/* 2-D convolution (correlation) with a (2R+1)^2 filter in constant memory; pixels outside
 * the image count as zero. */
#ifndef R
#define R 3
#endif
__kernel void convolve2d(__global const float *img, __constant float *filt, __global float *out,
                         const uint width, const uint height)
{
    const int x = get_global_id(0);
    const int y = get_global_id(1);
    float acc = 0.0f;
    for (int dy = -R; dy <= R; ++dy) {
        const int yy = y + dy;
        if (yy < 0 || yy >= (int)height)
            continue;
        for (int dx = -R; dx <= R; ++dx) {
            const int xx = x + dx;
            if (xx < 0 || xx >= (int)width)
                continue;
            acc += img[yy * (int)width + xx] * filt[(dy + R) * (2 * R + 1) + dx + R];
        }
    }
    out[y * width + x] = acc;
}
