/* The compiled CPU kernels of icrl_gym/models/native.py: two attention steps of a rollout.
 *
 * Built on first use by icrl_gym/models/native_build.py with the system C compiler and called through
 * ctypes; where no compiler is found the PyTorch paths compute the same functions.
 *
 * 1. icrl_relu_decode: the cached decode step of causal ReLU attention (Definition 1 of the paper),
 *    the paper-setting decoder's (decoder.py).
 *
 *    Layout ("lanes"): LANE consecutive trajectories are interleaved in the innermost dimension, so
 *    that every multiply-add below is one vector instruction across LANE trajectories and a
 *    (block, head) reads its keys and values as one contiguous stream:
 *
 *        q, y  (n_blocks, n_head, m,   hs, LANE)   the m newest queries (already scaled) and outputs
 *        K, V  (n_blocks, n_head, cap, hs, LANE)   keys/values of tokens 0 .. n-1, the m newest last
 *
 *    For query i (0-based among the m new ones, absolute position p = n - m + i):
 *
 *        y_i = sum_{j <= p} ReLU(<q_i, k_j>) v_j
 *
 *    the sum over j in increasing order, the dot product over the head dimension in increasing order.
 *
 * 2. icrl_arm_attention: softmax attention across the K arm tokens of one decision step, the
 *    generalists' (generalist.py, ArmSelfAttention).  See its comment below.
 */

#include <math.h>

#define LANE 16

int icrl_relu_decode_lane(void) { return LANE; }

/* One query of one (block, head): n_keys keys, head size hs (a constant where inlined below). */
static inline void attend(const float *restrict q, const float *restrict K, const float *restrict V,
                          float *restrict y, long n_keys, const long hs) {
    float qq[hs][LANE], acc[hs][LANE];
    for (long d = 0; d < hs; ++d)
        for (int l = 0; l < LANE; ++l) {
            qq[d][l] = q[d * LANE + l];
            acc[d][l] = 0.0f;
        }
    for (long j = 0; j < n_keys; ++j) {
        const float *k = K + j * hs * LANE, *v = V + j * hs * LANE;
        float s[LANE];
        for (int l = 0; l < LANE; ++l) s[l] = 0.0f;
        for (long d = 0; d < hs; ++d)
            for (int l = 0; l < LANE; ++l) s[l] += k[d * LANE + l] * qq[d][l];
        for (int l = 0; l < LANE; ++l) s[l] = s[l] > 0.0f ? s[l] : 0.0f;
        for (long d = 0; d < hs; ++d)
            for (int l = 0; l < LANE; ++l) acc[d][l] += s[l] * v[d * LANE + l];
    }
    for (long d = 0; d < hs; ++d)
        for (int l = 0; l < LANE; ++l) y[d * LANE + l] = acc[d][l];
}

/* All n_blocks blocks of the layout above, split across n_threads OpenMP threads where the library
 * was built with -fopenmp (it then shares PyTorch's OpenMP runtime, libgomp.so.1 being loaded
 * already); each block is computed by one thread, so the result does not depend on n_threads. */
void icrl_relu_decode(const float *q, const float *K, const float *V, float *y, long n_blocks,
                      long n_head, long cap, long n, long hs, long m, int n_threads) {
    (void)n_threads; /* unused without OpenMP */
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (long b = 0; b < n_blocks; ++b)
        for (long h = 0; h < n_head; ++h) {
            long bh = b * n_head + h;
            const float *Kbh = K + bh * cap * hs * LANE, *Vbh = V + bh * cap * hs * LANE;
            for (long i = 0; i < m; ++i) {
                const float *qi = q + (bh * m + i) * hs * LANE;
                float *yi = y + (bh * m + i) * hs * LANE;
                long n_keys = n - m + i + 1;
                switch (hs) { /* constant head sizes keep qq and acc in vector registers */
                case 4: attend(qi, Kbh, Vbh, yi, n_keys, 4); break;
                case 8: attend(qi, Kbh, Vbh, yi, n_keys, 8); break;
                case 16: attend(qi, Kbh, Vbh, yi, n_keys, 16); break;
                default: attend(qi, Kbh, Vbh, yi, n_keys, hs);
                }
            }
        }
}

/* Softmax attention across the k arm tokens of one row, every head (head size dh, a constant where
 * inlined below).  qkv (k, 3, h, dh): the arms' queries, keys and values, the output of one linear map
 * D -> 3D with D = h dh; mask (k) (nonzero: a real arm) or NULL; y (k, h, dh):
 *
 *     y_i = sum_j softmax_j(<q_i, k_j> / denom + log mask_j) v_j    (denom = sqrt(dh))
 *
 * the maximum subtracted before the exponential, as PyTorch's written-out path does. */
static inline void arm_row(const float *restrict qkv, const unsigned char *restrict mask, float *restrict y,
                           long k, long h, const long dh, float denom) {
    const long d = h * dh, stride = 3 * d;
    float s[k];
    for (long hh = 0; hh < h; ++hh)
        for (long i = 0; i < k; ++i) {
            const float *q = qkv + i * stride + hh * dh;
            float top = -INFINITY;
            for (long j = 0; j < k; ++j) {
                if (mask && !mask[j]) {
                    s[j] = -INFINITY;
                    continue;
                }
                const float *kj = qkv + j * stride + d + hh * dh;
                float dot = 0.0f;
                for (long e = 0; e < dh; ++e) dot += q[e] * kj[e];
                s[j] = dot / denom;
                top = s[j] > top ? s[j] : top;
            }
            float z = 0.0f;
            for (long j = 0; j < k; ++j) {
                s[j] = expf(s[j] - top);
                z += s[j];
            }
            float acc[dh];
            for (long e = 0; e < dh; ++e) acc[e] = 0.0f;
            for (long j = 0; j < k; ++j) {
                const float *vj = qkv + j * stride + 2 * d + hh * dh, w = s[j] / z;
                for (long e = 0; e < dh; ++e) acc[e] += w * vj[e];
            }
            float *yi = y + i * d + hh * dh;
            for (long e = 0; e < dh; ++e) yi[e] = acc[e];
        }
}

/* n rows of k arms: qkv (n, k, 3, h, dh), mask (n, k) or NULL, y (n, k, h, dh); rows split across
 * n_threads OpenMP threads (one row is computed by one thread, so the result does not depend on n_threads). */
void icrl_arm_attention(const float *qkv, const unsigned char *mask, float *y, long n, long k, long h, long dh,
                        float denom, int n_threads) {
    (void)n_threads; /* unused without OpenMP */
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (long b = 0; b < n; ++b) {
        const float *row = qkv + b * k * 3 * h * dh;
        const unsigned char *mrow = mask ? mask + b * k : 0;
        float *yrow = y + b * k * h * dh;
        switch (dh) { /* constant head sizes let the compiler unroll the dot products */
        case 8: arm_row(row, mrow, yrow, k, h, 8, denom); break;
        case 16: arm_row(row, mrow, yrow, k, h, 16, denom); break;
        default: arm_row(row, mrow, yrow, k, h, dh, denom);
        }
    }
}
