/*
 * pytest_graphir.capture._moments: one pass over a dense CPU tensor's memory for the
 * statistics a trace records (see pytest_graphir/capture/stats/cpu.py, "fused_stats").
 *
 * configure(numel, is_neg, is_contiguous, data_ptr, size, stride, one_pass_ratio,
 *           float32_overflow)
 * tensor_stats(tensor, dtype) -> {"mean", "std", "min", "max", "nan", "inf"} or None:
 *     the statistics of a whole dense CPU tensor (stats.fused_stats); dtype: 0 float32,
 *     1 float64, 2 bfloat16. The caller checks device, dtype and layout.
 *
 * The kernels below read numel >= 1 elements laid out densely from the tensor's data
 * pointer, for sum, sum of squares, min and max, or the sum of (x - mean)**2.
 *
 * Numbers: LANES independent float64 accumulators (every float32 and bfloat16 value and
 * its square are exact in float64), combined in a fixed order, so the result is the
 * same bits wherever it runs: no fast-math, no FMA contraction (built with
 * -ffp-contract=off), and the AVX-512, AVX2 and baseline clones compute the same lanes.
 * min/max ignore NaN; the caller sees NaN in the sum (NaN propagates through every
 * addition) and falls back to torch for exact NaN/Inf handling.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define LANES 16

/* Elements ahead of the pass that each step of LANES asks the cache for (one line of
 * float32): a weight of tens of MiB is read at about the rate of torch.sum, not at
 * 1.7x its time (benchmarks/README.md, "Statistics constants"). Changes no result. */
#define PREFETCH 2048

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
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
        if (i + PREFETCH < n) __builtin_prefetch(&x[i + PREFETCH]);              \
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

/* -- tensor_stats: stats.fused_stats in C ---------------------------------------- */

/* torch._C.TensorBase's numel, is_neg, is_contiguous, data_ptr, size, stride (never
 * torch.Tensor's, which the patch interceptor wraps), and stats.cpu.ONE_PASS_RATIO,
 * stats.kinds.FLOAT32_OVERFLOW: set once by configure(). */
static PyObject *f_numel, *f_is_neg, *f_is_contiguous, *f_data_ptr, *f_size, *f_stride;
static double one_pass_ratio = -1.0, float32_overflow;
static PyObject *k_mean, *k_std, *k_min, *k_max, *k_nan, *k_inf, *zero;

static PyObject *configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "configure() takes 8 arguments, got %zd", nargs);
        return NULL;
    }
    double ratio = PyFloat_AsDouble(args[6]);
    if (ratio == -1.0 && PyErr_Occurred()) return NULL;
    double overflow = PyFloat_AsDouble(args[7]);
    if (overflow == -1.0 && PyErr_Occurred()) return NULL;
    PyObject **slots[6] = {&f_numel, &f_is_neg, &f_is_contiguous, &f_data_ptr, &f_size,
                           &f_stride};
    for (int i = 0; i < 6; i++) {
        Py_INCREF(args[i]);
        Py_XSETREF(*slots[i], args[i]);
    }
    one_pass_ratio = ratio;
    float32_overflow = overflow;
    Py_RETURN_NONE;
}

/* 1 / 0 for a true / false result of f(t), -1 on error */
static int ask(PyObject *f, PyObject *t) {
    PyObject *r = PyObject_CallOneArg(f, t);
    if (r == NULL) return -1;
    int truth = PyObject_IsTrue(r);
    Py_DECREF(r);
    return truth;
}

#define MAX_DIMS 64

/* stats.dense_flat's test for a tensor that is not contiguous: 1 when its strides, sorted
 * ascending, are the running products of their sizes (size-1 dimensions ignored), so
 * its numel elements lie one after another from its data pointer in some order of its
 * dimensions (channels_last, transposed); 0 when not (expanded, sliced), -1 on error. */
static int dense_in_memory(PyObject *t) {
    PyObject *sizes = PyObject_CallOneArg(f_size, t);
    if (sizes == NULL) return -1;
    PyObject *strides = PyObject_CallOneArg(f_stride, t);
    if (strides == NULL) {
        Py_DECREF(sizes);
        return -1;
    }
    int result = -1;
    long long size[MAX_DIMS], stride[MAX_DIMS];
    int kept = 0;
    if (!PyTuple_Check(sizes) || !PyTuple_Check(strides) ||
        PyTuple_GET_SIZE(sizes) != PyTuple_GET_SIZE(strides)) {
        PyErr_SetString(PyExc_TypeError, "size() and stride() must be tuples of one length");
        goto done;
    }
    if (PyTuple_GET_SIZE(sizes) > MAX_DIMS) {
        result = 0; /* not read here: the torch way */
        goto done;
    }
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(sizes); d++) {
        long long a = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes, d));
        long long b = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, d));
        if ((a == -1 || b == -1) && PyErr_Occurred()) goto done;
        if (a == 1) continue;
        /* insertion by stride, stable as Python's sorted() */
        int j = kept++;
        while (j > 0 && stride[j - 1] > b) {
            size[j] = size[j - 1];
            stride[j] = stride[j - 1];
            j--;
        }
        size[j] = a;
        stride[j] = b;
    }
    long long expected = 1;
    result = 1;
    for (int j = 0; j < kept; j++) {
        if (stride[j] != expected) {
            result = 0;
            break;
        }
        expected *= size[j];
    }
done:
    Py_DECREF(sizes);
    Py_DECREF(strides);
    return result;
}

static PyObject *tensor_stats(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "tensor_stats() takes 2 arguments, got %zd", nargs);
        return NULL;
    }
    if (one_pass_ratio < 0) {
        PyErr_SetString(PyExc_RuntimeError, "tensor_stats() before configure()");
        return NULL;
    }
    PyObject *t = args[0];
    long code = PyLong_AsLong(args[1]);
    if (code == -1 && PyErr_Occurred()) return NULL;
    if (code < 0 || code > 2) {
        PyErr_Format(PyExc_ValueError, "dtype code must be 0, 1 or 2, got %ld", code);
        return NULL;
    }
    PyObject *count = PyObject_CallOneArg(f_numel, t);
    if (count == NULL) return NULL;
    long long n = PyLong_AsLongLong(count);
    Py_DECREF(count);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n <= 0) Py_RETURN_NONE;
    int negative = ask(f_is_neg, t);
    if (negative < 0) return NULL;
    if (negative) Py_RETURN_NONE;
    int dense = ask(f_is_contiguous, t);
    if (dense == 0) dense = dense_in_memory(t); /* read in memory order */
    if (dense < 0) return NULL;
    if (!dense) Py_RETURN_NONE; /* expanded or sliced: the torch way copies it */
    PyObject *pointer = PyObject_CallOneArg(f_data_ptr, t);
    if (pointer == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) return NULL;
        PyErr_Clear(); /* no storage (a wrapper subclass): torch's own reductions */
        Py_RETURN_NONE;
    }
    void *address = PyLong_AsVoidPtr(pointer);
    Py_DECREF(pointer);
    if (address == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    /* a misaligned element (torch.frombuffer at an odd offset): reading it as float or
     * double is undefined behaviour in C, so the torch way, which copes */
    size_t item = code == 1 ? sizeof(double) : code == 0 ? sizeof(float) : sizeof(uint16_t);
    if ((uintptr_t)address % item) Py_RETURN_NONE;
    double out[4];
    if (code == 0) moments_f32((const float *)address, n, out);
    else if (code == 1) moments_f64((const double *)address, n, out);
    else moments_bf16((const uint16_t *)address, n, out);
    double total = out[0], squares = out[1], lo = out[2], hi = out[3];
    if (!(-INFINITY < lo && hi < INFINITY && -INFINITY < total && total < INFINITY &&
          squares < INFINITY))
        Py_RETURN_NONE; /* NaN (it never enters min/max, but always the sum) or Inf */
    double size = (double)n;
    double mean = total / size, ex2 = squares / size, var;
    if (mean * mean <= one_pass_ratio * ex2) {
        var = ex2 - mean * mean;
    } else {
        double deviations;
        if (code == 0) deviations = deviations_f32((const float *)address, n, mean);
        else if (code == 1) deviations = deviations_f64((const double *)address, n, mean);
        else deviations = deviations_bf16((const uint16_t *)address, n, mean);
        var = deviations / size;
    }
    double std = var > 0 ? sqrt(var) : 0.0;
    if (code != 1) {
        /* float32 and bfloat16 as torch's float32 reductions give them (masks filled
         * with finfo(float32).min): a sum beyond float32's range is +-Inf, so the mean
         * is too and the std Inf; squared deviations beyond it make the std Inf */
        if (fabs(total) > float32_overflow) {
            mean = copysign(INFINITY, total);
            std = INFINITY;
        } else if (var * size > float32_overflow) {
            std = INFINITY;
        }
    }
    PyObject *result = PyDict_New();
    if (result == NULL) return NULL;
    PyObject *keys[4] = {k_mean, k_std, k_min, k_max};
    double values[4] = {mean, std, lo, hi};
    for (int i = 0; i < 4; i++) {
        PyObject *v = PyFloat_FromDouble(values[i]);
        if (v == NULL || PyDict_SetItem(result, keys[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(v);
    }
    if (PyDict_SetItem(result, k_nan, zero) < 0 || PyDict_SetItem(result, k_inf, zero) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(numel, is_neg, is_contiguous, data_ptr, size, stride, one_pass_ratio, "
     "float32_overflow)"},
    {"tensor_stats", (PyCFunction)(void (*)(void))tensor_stats, METH_FASTCALL,
     "tensor_stats(tensor, dtype) -> statistics dict or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_moments",
    "One-pass statistics over a dense CPU tensor's memory (pytest_graphir.capture.stats).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__moments(void) {
    struct {
        PyObject **slot;
        const char *text;
    } keys[] = {{&k_mean, "mean"}, {&k_std, "std"}, {&k_min, "min"},
                {&k_max, "max"},   {&k_nan, "nan"}, {&k_inf, "inf"}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (*keys[i].slot == NULL) {
            *keys[i].slot = PyUnicode_InternFromString(keys[i].text);
            if (*keys[i].slot == NULL) return NULL;
        }
    }
    if (zero == NULL) {
        zero = PyLong_FromLong(0);
        if (zero == NULL) return NULL;
    }
    return PyModule_Create(&module);
}
