/*
 * pytest_graphir.capture._moments: one pass over a dense CPU tensor's memory for the
 * statistics a trace records (see pytest_graphir/capture/stats.py, "fused").
 *
 * moments(address, numel, dtype) -> (sum, sum of squares, min, max)
 * squared_deviations(address, numel, dtype, mean) -> sum of (x - mean)**2
 *
 * address: the tensor's first element (Tensor.data_ptr()), numel >= 1 elements laid out
 * densely; dtype: 0 float32, 1 float64, 2 bfloat16. The caller keeps the tensor alive
 * and checks everything else (device, density, dtype). Results are Python floats.
 *
 * Numbers: LANES independent float64 accumulators (every float32 and bfloat16 value and
 * its square are exact in float64), combined in a fixed order, so the result is the
 * same bits wherever it runs: no fast-math, no FMA contraction (built with
 * -ffp-contract=off), and the AVX2 and baseline clones compute the same lanes.
 * min/max ignore NaN; the caller sees NaN in the sum (NaN propagates through every
 * addition) and falls back to torch for exact NaN/Inf handling.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define LANES 16

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

static inline float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* One kernel per element type: LOAD(k) reads element k as T (float or double); sums
 * are kept in double lanes, min and max in T. */
#define MOMENTS_STEP(T, VALUE, j)                                                 \
    {                                                                            \
        T v = (VALUE);                                                           \
        double d = (double)v;                                                    \
        s[j] += d;                                                               \
        q[j] += d * d;                                                           \
        lo[j] = v < lo[j] ? v : lo[j];                                           \
        hi[j] = v > hi[j] ? v : hi[j];                                           \
    }

#define MOMENTS_BODY(T, LOAD)                                                     \
    double s[LANES], q[LANES];                                                   \
    T lo[LANES], hi[LANES];                                                      \
    T first = LOAD(0);                                                           \
    for (int j = 0; j < LANES; j++) {                                            \
        s[j] = q[j] = 0.0;                                                       \
        lo[j] = hi[j] = first;                                                   \
    }                                                                            \
    int64_t i = 0;                                                               \
    for (; i + LANES <= n; i += LANES) {                                         \
        for (int j = 0; j < LANES; j++) MOMENTS_STEP(T, LOAD(i + j), j)          \
    }                                                                            \
    for (int j = 0; i < n; i++, j++) MOMENTS_STEP(T, LOAD(i), j)                 \
    double sum = 0.0, squares = 0.0;                                             \
    T a = lo[0], b = hi[0];                                                      \
    for (int j = 0; j < LANES; j++) {                                            \
        sum += s[j];                                                             \
        squares += q[j];                                                         \
        a = lo[j] < a ? lo[j] : a;                                               \
        b = hi[j] > b ? hi[j] : b;                                               \
    }                                                                            \
    out[0] = sum;                                                                \
    out[1] = squares;                                                            \
    out[2] = (double)a;                                                          \
    out[3] = (double)b;

#define DEVIATIONS_BODY(T, LOAD)                                                  \
    double q[LANES];                                                             \
    for (int j = 0; j < LANES; j++) q[j] = 0.0;                                  \
    int64_t i = 0;                                                               \
    for (; i + LANES <= n; i += LANES) {                                         \
        for (int j = 0; j < LANES; j++) {                                        \
            double d = (double)LOAD(i + j) - mean;                               \
            q[j] += d * d;                                                       \
        }                                                                        \
    }                                                                            \
    for (int j = 0; i < n; i++, j++) {                                           \
        double d = (double)LOAD(i) - mean;                                       \
        q[j] += d * d;                                                           \
    }                                                                            \
    double total = 0.0;                                                          \
    for (int j = 0; j < LANES; j++) total += q[j];                               \
    return total;

#define LOAD_F32(k) (x[(k)])
#define LOAD_F64(k) (x[(k)])
#define LOAD_BF16(k) (bf16_to_float(x[(k)]))

CLONES static void moments_f32(const float *x, int64_t n, double *out) {
    MOMENTS_BODY(float, LOAD_F32)
}
CLONES static void moments_f64(const double *x, int64_t n, double *out) {
    MOMENTS_BODY(double, LOAD_F64)
}
CLONES static void moments_bf16(const uint16_t *x, int64_t n, double *out) {
    MOMENTS_BODY(float, LOAD_BF16)
}
CLONES static double deviations_f32(const float *x, int64_t n, double mean) {
    DEVIATIONS_BODY(float, LOAD_F32)
}
CLONES static double deviations_f64(const double *x, int64_t n, double mean) {
    DEVIATIONS_BODY(double, LOAD_F64)
}
CLONES static double deviations_bf16(const uint16_t *x, int64_t n, double mean) {
    DEVIATIONS_BODY(float, LOAD_BF16)
}

static int parse(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, void **address,
                 int64_t *n, int *dtype) {
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "expected %zd arguments, got %zd", want, nargs);
        return -1;
    }
    *address = PyLong_AsVoidPtr(args[0]);
    if (*address == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "address is 0");
        return -1;
    }
    long long count = PyLong_AsLongLong(args[1]);
    if (count == -1 && PyErr_Occurred()) return -1;
    if (count < 1) {
        PyErr_SetString(PyExc_ValueError, "numel must be at least 1");
        return -1;
    }
    long code = PyLong_AsLong(args[2]);
    if (code == -1 && PyErr_Occurred()) return -1;
    if (code < 0 || code > 2) {
        PyErr_Format(PyExc_ValueError, "dtype code must be 0, 1 or 2, got %ld", code);
        return -1;
    }
    *n = (int64_t)count;
    *dtype = (int)code;
    return 0;
}

static PyObject *moments(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *address;
    int64_t n;
    int dtype;
    double out[4];
    if (parse(args, nargs, 3, &address, &n, &dtype) < 0) return NULL;
    if (dtype == 0) moments_f32((const float *)address, n, out);
    else if (dtype == 1) moments_f64((const double *)address, n, out);
    else moments_bf16((const uint16_t *)address, n, out);
    return Py_BuildValue("(dddd)", out[0], out[1], out[2], out[3]);
}

static PyObject *squared_deviations(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *address;
    int64_t n;
    int dtype;
    if (parse(args, nargs, 4, &address, &n, &dtype) < 0) return NULL;
    double mean = PyFloat_AsDouble(args[3]);
    if (mean == -1.0 && PyErr_Occurred()) return NULL;
    double total;
    if (dtype == 0) total = deviations_f32((const float *)address, n, mean);
    else if (dtype == 1) total = deviations_f64((const double *)address, n, mean);
    else total = deviations_bf16((const uint16_t *)address, n, mean);
    return PyFloat_FromDouble(total);
}

static PyMethodDef methods[] = {
    {"moments", (PyCFunction)(void (*)(void))moments, METH_FASTCALL,
     "moments(address, numel, dtype) -> (sum, sum of squares, min, max)"},
    {"squared_deviations", (PyCFunction)(void (*)(void))squared_deviations, METH_FASTCALL,
     "squared_deviations(address, numel, dtype, mean) -> sum of (x - mean)**2"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_moments",
    "One-pass statistics over a dense CPU tensor's memory (pytest_graphir.capture.stats).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__moments(void) { return PyModule_Create(&module); }
