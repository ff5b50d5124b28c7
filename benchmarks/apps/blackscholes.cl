/* European call and put prices (Black-Scholes) with the Abramowitz-Stegun normal CDF. */
static inline float cnd(const float d)
{
    const float k = 1.0f / (1.0f + 0.2316419f * fabs(d));
    const float poly =
        k * (0.319381530f + k * (-0.356563782f + k * (1.781477937f + k * (-1.821255978f + k * 1.330274429f))));
    const float c = 1.0f - 0.398942280f * exp(-0.5f * d * d) * poly;
    return d < 0.0f ? 1.0f - c : c;
}

__kernel void black_scholes(__global const float *spot, __global const float *strike,
                            __global const float *years, __global float *call,
                            __global float *put, const float rate, const float vol)
{
    const uint i = get_global_id(0);
    const float s = spot[i], k = strike[i], t = years[i];
    const float sq = sqrt(t);
    const float d1 = (log(s / k) + (rate + 0.5f * vol * vol) * t) / (vol * sq);
    const float d2 = d1 - vol * sq;
    const float disc = exp(-rate * t);
    call[i] = s * cnd(d1) - k * disc * cnd(d2);
    put[i] = k * disc * cnd(-d2) - s * cnd(-d1);
}
