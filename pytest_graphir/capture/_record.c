/*
 * pytest_graphir.capture._record: the tracer's per-op callback in C (see
 * pytest_graphir/capture/tracer.py, _Trace.record_op, and docs/capture.md "Cost").
 *
 * Handler(...) is RecordingMode.__torch_function__ (pytest_graphir/capture/mode.py) in
 * C: op_info's cache, the before_write check, the call, then record(...).
 *
 * Recorder(...) is called as record(op, raw, args, kwargs, out) by the
 * TorchFunctionMode once per recorded op. It does what _Trace.record_op does for the
 * common case: one plain torch.Tensor output, no user TorchFunctionMode underneath,
 * an op outside `python_ops`. Everything else (several outputs, tensor subclasses,
 * uninitialised memory, random draws, x.view_as(x), blackbox modules) goes to the
 * Python method, which stays the reference: the two give the same nodes (tested on
 * every architecture of the breadth suite, tests/test_record_fast.py).
 *
 * Where the Python code calls another method of the trace (render() of a constant,
 * labels.ref() of an unseen tensor, stats.add(), new_meta() of a parameter whose
 * statistics are not queued yet, _output_meta() of a tensor returned unchanged), this
 * code calls the same Python method: only the common case is duplicated here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;     /* _Trace.record_op (bound) */
    PyObject *trace;        /* the _Trace: render, new_meta, _output_meta, stats */
    PyObject *labels_ref;   /* trace.labels.ref (bound) */
    PyObject *entries;      /* trace.labels.entries: id -> (weakref, ref, meta, version) */
    PyObject *counters;     /* trace.counters: op node base -> calls so far */
    PyObject *nodes;        /* trace.nodes */
    PyObject *scope;        /* trace.scope: blackbox_depth, stack */
    PyObject *unqueued;     /* trace.unqueued: ids of metas whose statistics wait */
    PyObject *python_ops;   /* frozenset of canonical op names left to `fallback` */
    PyObject *same;         /* SAME_ELEMENTS */
    PyObject *node_type;    /* ir.Node */
    PyObject *meta_type;    /* ir.TensorMeta */
    PyObject *tensor_type;  /* torch.Tensor */
    PyObject *op_node_base; /* names.op_node_base */
    PyObject *dtype_name;   /* names.dtype_name */
    PyObject *mode_enabled; /* torch._C._is_torch_function_mode_enabled */
    PyObject *tensor_stats; /* _moments.tensor_stats, or None (not built) */
    PyObject *fused_codes;  /* stats._FUSED_CODES: dtype -> tensor_stats dtype code */
    PyObject *strided;      /* torch.strided */
    PyObject *module_nodes; /* trace.module_nodes: label -> module Node */
    PyObject *calls;        /* scope.calls: module path -> calls so far */
    PyObject *blackboxes;   /* scope.blackboxes */
    PyObject *py_pre;       /* scope._pre: the Python forward pre-hook */
    PyObject *py_post;      /* scope._post: the Python forward hook */
    PyObject *disable;      /* torch._C.DisableTorchFunction */
    PyObject *dtype_type;   /* torch.dtype */
    PyObject *named;        /* trace.named: references of inputs, parameters, buffers */
    PyObject *device_type;  /* torch.device */
    PyObject *random_ops;   /* naming.TRAINING_RANDOM_OPS (names): of python_ops, those
                             * recorded here when the call draws nothing */
    PyObject *is_random;    /* naming.is_random_call */
    PyObject *relabelled;   /* trace.relabelled: reference -> (the one it took over, when) */
    PyObject *bases;        /* scope label -> {op -> op node base} */
    PyObject *dtypes;       /* dtype -> dtype_name(dtype) */
} Recorder;

static PyObject *s_blackbox_depth, *s_stack, *s_stats, *s_shape, *s_dtype, *s_version,
    *s_add, *s_render, *s_new_meta, *s_output_meta, *s_numel, *s_op, *s_prefix, *s_batched,
    *s_is_cpu, *s_layout, *s_is_nested, *s_kwargs_at_entry, *s_add_unfused, *s_active,
    *s_on_event, *s_names, *s_name, *s_module, *s_kwargs, *s_outputs, *s_ref, *s_enter,
    *s_exit, *s_named_modules, *s_parameters, *s_buffers, *s_modules, *s_is_inference,
    *s_device, *s_empty, *s_getattribute;

#define N_FIELDS 31

/* MAX_CONST_LIST (tracer.py): a longer tuple or list of constants is left to Python */
#define MAX_CONST_LIST 64

/* -- ir.Node and ir.TensorMeta without their dataclass __init__ ----------------------
 * Both are dataclass(slots=True): an instance is the type's tp_alloc with each slot set
 * through its member descriptor, the fields in declaration order. That is what the
 * generated __init__ does, minus its Python frame and the default factories' calls
 * (measured: 0.19 us and 0.16 us per call against about 0.05 us). The field names are
 * checked once per type against these lists: a field added in ir.py fails loudly here
 * (TypeError on the first trace) rather than being left unset. */

#define MAX_SLOTS 8
static const char *const NODE_FIELDS[] = {"name", "kind",    "target", "args",
                                          "kwargs", "outputs", "raw",   "params", NULL};
static const char *const META_FIELDS[] = {"shape", "dtype", "stats", "random", NULL};

typedef struct {
    PyTypeObject *type; /* borrowed identity check; the descriptors keep it alive */
    int n;
    PyObject *descr[MAX_SLOTS];
} Slots;

static Slots node_slots, meta_slots;

/* Fill `b` for `type` (once per type object). -1 with TypeError when its fields are not
 * `names` in this order, or not plain slots. */
static int slots_of(Slots *b, PyObject *type, const char *const *names) {
    if (b->type == (PyTypeObject *)type) return 0;
    PyObject *fields = PyObject_GetAttrString(type, "__dataclass_fields__");
    if (fields == NULL) return -1;
    int n = 0, ok = PyDict_Check(fields) && PyType_Check(type);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    PyObject *descr[MAX_SLOTS] = {NULL};
    while (ok && PyDict_Next(fields, &pos, &key, &value)) {
        ok = n < MAX_SLOTS && names[n] != NULL && PyUnicode_Check(key) &&
             PyUnicode_CompareWithASCIIString(key, names[n]) == 0;
        if (!ok) break;
        PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, key);
        ok = d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type);
        if (ok) descr[n++] = Py_NewRef(d);
    }
    Py_DECREF(fields);
    ok = ok && names[n] == NULL;
    if (!ok) {
        for (int i = 0; i < n; i++) Py_DECREF(descr[i]);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError,
                         "pytest_graphir.capture._record: %R is not the dataclass(slots=True) "
                         "with the fields this build expects; rebuild the extension "
                         "(pip install -e .) or set tracer.FAST_RECORD = False",
                         type);
        return -1;
    }
    for (int i = 0; i < b->n; i++) Py_CLEAR(b->descr[i]);
    for (int i = 0; i < n; i++) b->descr[i] = descr[i];
    b->n = n;
    b->type = (PyTypeObject *)type;
    return 0;
}

/* type(*values) for a Slots type: every field given, in order (new reference). */
static PyObject *build(Slots *b, PyObject *type, const char *const *names,
                       PyObject *const *values) {
    if (slots_of(b, type, names) < 0) return NULL;
    PyObject *obj = b->type->tp_alloc(b->type, 0);
    if (obj == NULL) return NULL;
    for (int i = 0; i < b->n; i++) {
        PyObject *d = b->descr[i];
        if (Py_TYPE(d)->tp_descr_set(d, obj, values[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

/* TensorMeta(shape, dtype, stats or {}, random=False) (new reference). */
static PyObject *new_tensor_meta(PyObject *type, PyObject *shape, PyObject *dtype,
                                 PyObject *stats) {
    PyObject *own = stats == NULL ? PyDict_New() : Py_NewRef(stats);
    if (own == NULL) return NULL;
    PyObject *values[4] = {shape, dtype, own, Py_False};
    PyObject *meta = build(&meta_slots, type, META_FIELDS, values);
    Py_DECREF(own);
    return meta;
}

/* Node(name, kind, target, args, kwargs or {}, outputs or [], raw or "", params=None)
 * (new reference). */
static PyObject *new_node(PyObject *type, PyObject *name, PyObject *kind, PyObject *target,
                          PyObject *args, PyObject *kwargs, PyObject *outputs, PyObject *raw) {
    PyObject *kw = kwargs == NULL ? PyDict_New() : Py_NewRef(kwargs);
    PyObject *out = kw == NULL ? NULL : outputs == NULL ? PyList_New(0) : Py_NewRef(outputs);
    PyObject *node = NULL;
    if (out != NULL) {
        PyObject *values[8] = {name, kind, target, args, kw, out,
                               raw == NULL ? s_empty : raw, Py_None};
        node = build(&node_slots, type, NODE_FIELDS, values);
    }
    Py_XDECREF(kw);
    Py_XDECREF(out);
    return node;
}

/* The referent of a weak reference (new reference), None once it died, NULL on error. */
static PyObject *deref(PyObject *weak) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *referent;
    if (PyWeakref_GetRef(weak, &referent) < 0) return NULL;
    return referent == NULL ? Py_NewRef(Py_None) : referent;
#else
    PyObject *referent = PyWeakref_GetObject(weak);
    return referent == NULL ? NULL : Py_NewRef(referent);
#endif
}

/* The live label entry of `t` (borrowed), or NULL: none, or the id's tensor died.
 * `key` receives id(t) (a new reference) when not NULL. Sets *error on failure. */
static PyObject *live_entry(Recorder *self, PyObject *t, PyObject **key, int *error) {
    PyObject *k = PyLong_FromVoidPtr(t);
    if (k == NULL) {
        *error = 1;
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(self->entries, k);
    if (key != NULL) *key = k;
    else Py_DECREF(k);
    if (entry == NULL) {
        if (PyErr_Occurred()) *error = 1;
        return NULL;
    }
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 4) return NULL;
    PyObject *referent = deref(PyTuple_GET_ITEM(entry, 0));
    if (referent == NULL) {
        *error = 1;
        return NULL;
    }
    Py_DECREF(referent); /* only compared by identity; the caller holds t */
    return referent == t ? entry : NULL;
}

/* entries[key] = (weak, label, meta, version): a tensor's label entry, the layout
 * TensorLabels.set writes. 0, or -1 on error. */
static int put_entry(PyObject *entries, PyObject *key, PyObject *weak, PyObject *label,
                     PyObject *meta, PyObject *version) {
    PyObject *value = PyTuple_Pack(4, weak, label, meta, version);
    int failed = value == NULL || PyDict_SetItem(entries, key, value) < 0;
    Py_XDECREF(value);
    return failed ? -1 : 0;
}

/* The items of a tuple, or a tuple copy of a list's (new reference): they stay alive
 * and in place while Python code runs between them. */
static PyObject *items_of(PyObject *v) {
    return PyList_CheckExact(v) ? PyList_AsTuple(v) : Py_NewRef(v);
}

/* fn(key) through the dict `cache` (new reference): names.dtype_name per dtype. */
static PyObject *cached_call(PyObject *cache, PyObject *fn, PyObject *key) {
    PyObject *value = PyDict_GetItemWithError(cache, key);
    if (value != NULL) return Py_NewRef(value);
    if (PyErr_Occurred()) return NULL;
    value = PyObject_CallOneArg(fn, key);
    if (value != NULL && PyDict_SetItem(cache, key, value) < 0) Py_CLEAR(value);
    return value;
}

/* dtype_name(dtype), cached (new reference). */
static PyObject *dtype_label(Recorder *self, PyObject *dtype) {
    return cached_call(self->dtypes, self->dtype_name, dtype);
}

static PyObject *nested_shape_of; /* pytest_graphir.capture.nested.shape_of, imported once */

/* list(t.shape) (new reference); for a nested tensor, whose t.shape raises (strided
 * layout) or holds a nested int (jagged), nested.shape_of(t). */
static PyObject *shape_list(PyObject *t) {
    PyObject *shape = PyObject_GetAttr(t, s_shape);
    if (shape != NULL) {
        PyObject *sizes = PySequence_List(shape);
        Py_DECREF(shape);
        if (sizes == NULL) return NULL;
        int plain = 1;
        for (Py_ssize_t i = 0; plain && i < PyList_GET_SIZE(sizes); i++)
            plain = PyLong_CheckExact(PyList_GET_ITEM(sizes, i));
        if (plain) return sizes;
        Py_DECREF(sizes);
    } else if (PyErr_ExceptionMatches(PyExc_RuntimeError)) {
        PyErr_Clear(); /* shape_of raises it again where t is not nested */
    } else {
        return NULL;
    }
    if (nested_shape_of == NULL) {
        PyObject *nested = PyImport_ImportModule("pytest_graphir.capture.nested");
        if (nested == NULL) return NULL;
        nested_shape_of = PyObject_GetAttrString(nested, "shape_of");
        Py_DECREF(nested);
        if (nested_shape_of == NULL) return NULL;
    }
    return PyObject_CallOneArg(nested_shape_of, t);
}

/* An entered torch._C.DisableTorchFunction() (new reference), or NULL on error. */
static PyObject *disabled_enter(PyObject *disable) {
    PyObject *guard = PyObject_CallNoArgs(disable);
    PyObject *entered = guard == NULL ? NULL : PyObject_CallMethodNoArgs(guard, s_enter);
    if (entered == NULL) {
        Py_XDECREF(guard);
        return NULL;
    }
    Py_DECREF(entered);
    return guard;
}

/* Leave (and release) a disabled_enter() guard; an exception already set is kept
 * across its __exit__. -1 when __exit__ itself fails (its error replaces any other). */
static int disabled_exit(PyObject *guard) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *exited = PyObject_CallMethodObjArgs(guard, s_exit, Py_None, Py_None, Py_None, NULL);
    Py_DECREF(guard);
    if (exited == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return -1;
    }
    Py_DECREF(exited);
    PyErr_Restore(type, value, traceback);
    return 0;
}

/* None, a bool, or an exact int or float: an argument written as it is (tracer._PLAIN) */
static int is_plain(PyObject *v) {
    return v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v);
}

/* render(v) of one argument (new reference): a tensor's reference, a plain scalar as
 * it is, a tuple or list of at most MAX_CONST_LIST items as the list of theirs
 * (_render_sequence), a dtype by name, anything else through the trace's render(). */
static PyObject *render_one(Recorder *self, PyObject *v) {
    if (is_plain(v)) return Py_NewRef(v);
    int is_tensor = Py_IS_TYPE(v, (PyTypeObject *)self->tensor_type)
                        ? 1
                        : PyObject_IsInstance(v, self->tensor_type);
    if (is_tensor < 0) return NULL;
    if (is_tensor) {
        int error = 0;
        PyObject *entry = live_entry(self, v, NULL, &error);
        if (error) return NULL;
        if (entry != NULL) return Py_NewRef(PyTuple_GET_ITEM(entry, 1));
        return PyObject_CallOneArg(self->labels_ref, v);
    }
    if ((PyTuple_CheckExact(v) || PyList_CheckExact(v)) &&
        PySequence_Fast_GET_SIZE(v) <= MAX_CONST_LIST) {
        PyObject *items = items_of(v);
        if (items == NULL) return NULL;
        Py_ssize_t n = PyTuple_GET_SIZE(items);
        PyObject *out = PyList_New(n);
        for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
            PyObject *item = render_one(self, PyTuple_GET_ITEM(items, i));
            if (item == NULL) Py_CLEAR(out);
            else PyList_SET_ITEM(out, i, item);
        }
        Py_DECREF(items);
        return out;
    }
    if (Py_IS_TYPE(v, (PyTypeObject *)self->dtype_type)) return dtype_label(self, v);
    if (Py_IS_TYPE(v, (PyTypeObject *)self->device_type)) return Py_NewRef(s_device);
    if (PyUnicode_CheckExact(v) && PyUnicode_Tailmatch(v, s_prefix, 0, 1, -1) == 0)
        return Py_NewRef(v); /* escape_constant: only a string starting with $ changes */
    return PyObject_CallMethodOneArg(self->trace, s_render, v);
}

enum { QUEUE_NONE, QUEUE_ADD, QUEUE_UNFUSED };

/* What StatsBatch.add(t, meta) would do first: where the C extension applies (a CPU
 * tensor of a dtype it reads, strided, statistics not batched), its tensor_stats():
 * *fused receives the statistics (QUEUE_NONE), or None sends the tensor to
 * StatsBatch.add_unfused (QUEUE_UNFUSED). Anything else: StatsBatch.add (QUEUE_ADD).
 * -1 on error. */
static int try_fused(Recorder *self, PyObject *stats, PyObject *t, PyObject **fused) {
    if (self->tensor_stats == Py_None) return QUEUE_ADD;
    PyObject *batched = PyObject_GetAttr(stats, s_batched);
    if (batched == NULL) return -1;
    int all_batched = batched == Py_True;
    Py_DECREF(batched);
    if (all_batched) return QUEUE_ADD;
    PyObject *cpu = PyObject_GetAttr(t, s_is_cpu);
    if (cpu == NULL) return -1;
    int is_cpu = PyObject_IsTrue(cpu);
    Py_DECREF(cpu);
    if (is_cpu <= 0) return is_cpu < 0 ? -1 : QUEUE_ADD;
    PyObject *dtype = PyObject_GetAttr(t, s_dtype);
    if (dtype == NULL) return -1;
    PyObject *code = PyDict_GetItemWithError(self->fused_codes, dtype);
    Py_DECREF(dtype);
    if (code == NULL) return PyErr_Occurred() ? -1 : QUEUE_ADD;
    Py_INCREF(code);
    PyObject *layout = PyObject_GetAttr(t, s_layout);
    if (layout == NULL) {
        Py_DECREF(code);
        return -1;
    }
    int is_strided = layout == self->strided;
    Py_DECREF(layout);
    if (is_strided) { /* a nested tensor of the strided layout: StatsBatch.add_unfused */
        PyObject *nested = PyObject_GetAttr(t, s_is_nested);
        is_strided = nested == NULL ? -1 : nested == Py_False;
        Py_XDECREF(nested);
        if (is_strided < 0) {
            Py_DECREF(code);
            return -1;
        }
    }
    if (!is_strided) {
        Py_DECREF(code);
        return QUEUE_ADD;
    }
    PyObject *targs[2] = {t, code};
    PyObject *result = PyObject_Vectorcall(self->tensor_stats, targs, 2, NULL);
    Py_DECREF(code);
    if (result == NULL) return -1;
    if (result == Py_None) {
        Py_DECREF(result);
        return QUEUE_UNFUSED;
    }
    *fused = result;
    return QUEUE_NONE;
}

/* TensorMeta(list(t.shape), dtype_name(t.dtype)) with its statistics computed or
 * queued: the trace's stats_meta(). */
static PyObject *stats_meta(Recorder *self, PyObject *t) {
    PyObject *sizes = shape_list(t);
    if (sizes == NULL) return NULL;
    PyObject *dtype = PyObject_GetAttr(t, s_dtype);
    if (dtype == NULL) {
        Py_DECREF(sizes);
        return NULL;
    }
    PyObject *name = dtype_label(self, dtype);
    Py_DECREF(dtype);
    if (name == NULL) {
        Py_DECREF(sizes);
        return NULL;
    }
    PyObject *stats = PyObject_GetAttr(self->trace, s_stats);
    PyObject *fused = NULL, *meta = NULL;
    int queue = QUEUE_NONE;
    if (stats != NULL && stats != Py_None) queue = try_fused(self, stats, t, &fused);
    if (stats != NULL && queue >= 0) {
        meta = new_tensor_meta(self->meta_type, sizes, name, fused);
    }
    Py_XDECREF(fused);
    Py_DECREF(sizes);
    Py_DECREF(name);
    if (meta != NULL && stats != Py_None && queue != QUEUE_NONE) {
        PyObject *method = queue == QUEUE_ADD ? s_add : s_add_unfused;
        PyObject *done = PyObject_CallMethodObjArgs(stats, method, t, meta, NULL);
        if (done == NULL) Py_CLEAR(meta);
        Py_XDECREF(done);
    }
    Py_XDECREF(stats);
    return meta;
}

/* 1 when getattr(a, name) == getattr(b, name), 0 when not, -1 on error. */
static int same_attr(PyObject *a, PyObject *b, PyObject *name) {
    PyObject *x = PyObject_GetAttr(a, name);
    if (x == NULL) return -1;
    PyObject *y = PyObject_GetAttr(b, name);
    if (y == NULL) {
        Py_DECREF(x);
        return -1;
    }
    int eq = PyObject_RichCompareBool(x, y, Py_EQ);
    Py_DECREF(x);
    Py_DECREF(y);
    return eq;
}

/* The trace's new_meta(t, source) for a `t` without a live, unchanged entry: the
 * source's statistics are shared when it holds the same elements. */
static PyObject *new_meta(Recorder *self, PyObject *t, PyObject *source) {
    int is_tensor = PyObject_IsInstance(source, self->tensor_type);
    if (is_tensor < 0) return NULL;
    if (!is_tensor) return stats_meta(self, t);
    int error = 0;
    PyObject *entry = live_entry(self, source, NULL, &error);
    if (error) return NULL;
    if (entry == NULL) return stats_meta(self, t);
    Py_INCREF(entry); /* the calls below run Python code */
    PyObject *version = PyObject_GetAttr(source, s_version);
    int eq = version == NULL
                 ? -1
                 : PyObject_RichCompareBool(PyTuple_GET_ITEM(entry, 3), version, Py_EQ);
    Py_XDECREF(version);
    if (eq == 1) eq = same_attr(source, t, s_dtype);
    if (eq == 1) {
        PyObject *a = PyObject_CallMethodNoArgs(source, s_numel);
        PyObject *b = a == NULL ? NULL : PyObject_CallMethodNoArgs(t, s_numel);
        eq = b == NULL ? -1 : PyObject_RichCompareBool(a, b, Py_EQ);
        Py_XDECREF(a);
        Py_XDECREF(b);
    }
    if (eq < 0) {
        Py_DECREF(entry);
        return NULL;
    }
    if (eq == 0) {
        Py_DECREF(entry);
        return stats_meta(self, t);
    }
    PyObject *shared = PyTuple_GET_ITEM(entry, 2);
    PyObject *id = PyLong_FromVoidPtr(shared);
    int waiting = id == NULL ? -1 : PySet_Contains(self->unqueued, id);
    Py_XDECREF(id);
    if (waiting != 0) {
        Py_DECREF(entry);
        /* a parameter or buffer handed on for the first time: the Python method
         * queues its statistics (known_meta) */
        return waiting < 0 ? NULL
                           : PyObject_CallMethodObjArgs(self->trace, s_new_meta, t, source, NULL);
    }
    PyObject *sizes = shape_list(t);
    PyObject *dtype = sizes == NULL ? NULL : PyObject_GetAttr(shared, s_dtype);
    PyObject *stats = dtype == NULL ? NULL : PyObject_GetAttr(shared, s_stats);
    PyObject *meta = NULL;
    if (stats != NULL) {
        meta = new_tensor_meta(self->meta_type, sizes, dtype, stats);
    }
    Py_XDECREF(sizes);
    Py_XDECREF(dtype);
    Py_XDECREF(stats);
    Py_DECREF(entry);
    return meta;
}

/* trace.relabelled[label] = (old, len(nodes)): the reference `label` took over the
 * tensor that was `old` (written in place, or returned unchanged), as _Trace.label and
 * _output_meta note it for kwargs_at_entry. 0, or -1 on error. */
static int note_relabel(Recorder *self, PyObject *label, PyObject *old) {
    PyObject *value = Py_BuildValue("(On)", old, PyList_GET_SIZE(self->nodes));
    int failed = value == NULL || PyDict_SetItem(self->relabelled, label, value) < 0;
    Py_XDECREF(value);
    return failed ? -1 : 0;
}

/* _output_meta for a tensor an op returned unchanged (its live entry `entry` has its
 * current version): the entry's meta, and the tensor relabelled `label` unless it is
 * an input, parameter or buffer (`named`), which keeps its name. NULL with no error set
 * when the meta's statistics are still to be queued (known_meta): Python does it. */
static PyObject *unchanged_output(Recorder *self, PyObject *entry, PyObject *key,
                                  PyObject *label, PyObject *version) {
    Py_INCREF(entry);
    PyObject *meta = PyTuple_GET_ITEM(entry, 2), *result = NULL;
    PyObject *id = PyLong_FromVoidPtr(meta);
    int waiting = id == NULL ? -1 : PySet_Contains(self->unqueued, id);
    Py_XDECREF(id);
    int kept = waiting == 0 ? PySet_Contains(self->named, PyTuple_GET_ITEM(entry, 1)) : 0;
    if (waiting == 0 && kept == 0) {
        if (note_relabel(self, label, PyTuple_GET_ITEM(entry, 1)) == 0 &&
            put_entry(self->entries, key, PyTuple_GET_ITEM(entry, 0), label, meta, version) == 0)
            result = Py_NewRef(meta);
    } else if (waiting == 0 && kept == 1) {
        result = Py_NewRef(meta);
    }
    Py_DECREF(entry);
    return result;
}

/* The trace's _output_meta(t, label, source): t's meta, and t labelled `label`. */
static PyObject *output_meta(Recorder *self, PyObject *t, PyObject *label, PyObject *source) {
    PyObject *key = NULL;
    int error = 0;
    PyObject *entry = live_entry(self, t, &key, &error);
    if (error) {
        Py_XDECREF(key);
        return NULL;
    }
    PyObject *version = PyObject_GetAttr(t, s_version);
    if (version == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *weak = NULL, *old = NULL;
    if (entry != NULL) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(entry, 3), version, Py_EQ);
        if (eq != 0) { /* returned unchanged: the same statistics (_output_meta) */
            PyObject *result = eq < 0 ? NULL : unchanged_output(self, entry, key, label, version);
            if (result == NULL && !PyErr_Occurred()) /* a parameter's first hand-on */
                result = PyObject_CallMethodObjArgs(self->trace, s_output_meta, t, label,
                                                    source == NULL ? Py_None : source, NULL);
            Py_DECREF(key);
            Py_DECREF(version);
            return result;
        }
        weak = Py_NewRef(PyTuple_GET_ITEM(entry, 0));
        old = Py_NewRef(PyTuple_GET_ITEM(entry, 1)); /* written in place: relabelled */
    }
    PyObject *meta = source == NULL ? stats_meta(self, t) : new_meta(self, t, source);
    if (meta != NULL && weak == NULL) {
        weak = PyWeakref_NewRef(t, NULL);
        if (weak == NULL) Py_CLEAR(meta);
    }
    if (meta != NULL && put_entry(self->entries, key, weak, label, meta, version) < 0)
        Py_CLEAR(meta);
    if (meta != NULL && old != NULL && note_relabel(self, label, old) < 0) Py_CLEAR(meta);
    Py_XDECREF(old);
    Py_XDECREF(weak);
    Py_DECREF(version);
    Py_DECREF(key);
    return meta;
}

/* *k = counts.get(key, 0), and counts[key] = *k + 1: the index of this call of an op
 * node base (_Trace.counters) or of a module path (ModuleScope.calls). 0, or -1 on
 * error. */
static int next_index(PyObject *counts, PyObject *key, Py_ssize_t *k) {
    PyObject *count = PyDict_GetItemWithError(counts, key);
    *k = 0;
    if (count != NULL) {
        *k = PyLong_AsSsize_t(count);
        if (*k == -1 && PyErr_Occurred()) return -1;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    PyObject *next = PyLong_FromSsize_t(*k + 1);
    int failed = next == NULL || PyDict_SetItem(counts, key, next) < 0;
    Py_XDECREF(next);
    return failed ? -1 : 0;
}

/* base + sep + str(k) for k >= 0 (new reference): an op node's "<base>#<k>", a module
 * call's "<path>@<k>". PyUnicode_FromFormat's %zd goes through the C library's printf,
 * about 1% of a structure-only trace of small ops (perf). */
static PyObject *indexed(PyObject *base, char sep, Py_ssize_t k) {
    if (k < 0) return PyUnicode_FromFormat("%U%c%zd", base, (int)sep, k);
    char buf[24];
    size_t i = sizeof buf;
    size_t v = (size_t)k;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    buf[--i] = sep;
    PyObject *suffix = PyUnicode_FromStringAndSize(buf + i, (Py_ssize_t)(sizeof buf - i));
    if (suffix == NULL) return NULL;
    PyObject *name = PyUnicode_Concat(base, suffix);
    Py_DECREF(suffix);
    return name;
}

/* The op node base of `op` in scope `label` (borrowed), cached. */
static PyObject *node_base(Recorder *self, PyObject *label, PyObject *op) {
    PyObject *ops = PyDict_GetItemWithError(self->bases, label);
    if (ops == NULL) {
        if (PyErr_Occurred()) return NULL;
        ops = PyDict_New();
        if (ops == NULL) return NULL;
        int failed = PyDict_SetItem(self->bases, label, ops);
        Py_DECREF(ops); /* the cache holds it */
        if (failed < 0) return NULL;
    }
    PyObject *base = PyDict_GetItemWithError(ops, op);
    if (base != NULL || PyErr_Occurred()) return base;
    base = PyObject_CallFunctionObjArgs(self->op_node_base, label, op, NULL);
    if (base == NULL) return NULL;
    int failed = PyDict_SetItem(ops, op, base);
    Py_DECREF(base); /* the cache holds it */
    return failed < 0 ? NULL : base;
}

static PyObject *record(Recorder *self, PyObject *op, PyObject *raw, PyObject *args,
                        PyObject *kwargs, PyObject *out) {
    /* `args` is a tuple, `kwargs` a dict, `out` a plain torch.Tensor */
    PyObject *stack = PyObject_GetAttr(self->scope, s_stack);
    if (stack == NULL) return NULL;
    if (!PyList_CheckExact(stack)) {
        Py_DECREF(stack);
        PyErr_SetString(PyExc_TypeError, "ModuleScope.stack must be a list");
        return NULL;
    }
    Py_ssize_t depth = PyList_GET_SIZE(stack);
    PyObject *base;
    if (depth == 0) {
        base = op;
    } else {
        base = node_base(self, PyList_GET_ITEM(stack, depth - 1), op);
    }
    Py_XINCREF(base);
    Py_DECREF(stack);
    if (base == NULL) return NULL;

    Py_ssize_t k;
    PyObject *name = next_index(self->counters, base, &k) < 0 ? NULL : indexed(base, '#', k);
    Py_DECREF(base);
    if (name == NULL) return NULL;

    PyObject *rendered = NULL, *rendered_kw = NULL, *label = NULL, *meta = NULL,
             *outputs = NULL, *node = NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    rendered = PyList_New(n);
    if (rendered == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = render_one(self, PyTuple_GET_ITEM(args, i));
        if (item == NULL) goto done;
        PyList_SET_ITEM(rendered, i, item);
    }
    rendered_kw = PyDict_New();
    if (rendered_kw == NULL) goto done;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
        Py_INCREF(key);
        Py_INCREF(value);
        PyObject *item = render_one(self, value);
        int failed = item == NULL || PyDict_SetItem(rendered_kw, key, item) < 0;
        Py_XDECREF(item);
        Py_DECREF(key);
        Py_DECREF(value);
        if (failed) goto done;
    }
    PyObject *source = NULL;
    if (n > 0) {
        int same = PySet_Contains(self->same, op);
        if (same < 0) goto done;
        if (same) source = PyTuple_GET_ITEM(args, 0);
    }
    label = PyUnicode_Concat(s_prefix, name);
    if (label == NULL) goto done;
    outputs = PyList_New(0);
    if (outputs == NULL) goto done;
    node = new_node(self->node_type, name, s_op, op, rendered, rendered_kw, outputs, raw);
    if (node == NULL) goto done;
    /* in the graph before its outputs are described, as in record_op: a node whose
     * outputs fail stays there (the model may catch the error) */
    if (PyList_Append(self->nodes, node) < 0) {
        Py_CLEAR(node);
        goto done;
    }
    meta = output_meta(self, out, label, source);
    if (meta == NULL || PyList_Append(outputs, meta) < 0) Py_CLEAR(node);
done:
    Py_DECREF(name);
    Py_XDECREF(rendered);
    Py_XDECREF(rendered_kw);
    Py_XDECREF(label);
    Py_XDECREF(meta);
    Py_XDECREF(outputs);
    if (node == NULL) return NULL;
    Py_DECREF(node);
    Py_RETURN_NONE;
}

/* -- module hooks: the scope's _pre/_post and the trace's enter/exit_module ---------- */

/* A module argument rendered without Python code (new reference), or NULL with no
 * error set where the trace's render() must do it (module_render): a live-labelled
 * tensor (its reference), a plain scalar, or (`nested`) an exact tuple or list of those,
 * of at most MAX_CONST_LIST items. Nothing here reads a tensor property, so it needs no
 * DisableTorchFunction. */
static PyObject *quick_render(Recorder *self, PyObject *v, int nested) {
    if (is_plain(v)) return Py_NewRef(v);
    int is_tensor = PyObject_IsInstance(v, self->tensor_type);
    if (is_tensor < 0) return NULL;
    if (is_tensor) {
        int error = 0;
        PyObject *entry = live_entry(self, v, NULL, &error);
        if (error || entry == NULL) return NULL;
        return Py_NewRef(PyTuple_GET_ITEM(entry, 1));
    }
    if (nested && (PyTuple_CheckExact(v) || PyList_CheckExact(v))) {
        if (PySequence_Fast_GET_SIZE(v) > MAX_CONST_LIST) return NULL;
        PyObject *items = items_of(v);
        if (items == NULL) return NULL;
        Py_ssize_t n = PyTuple_GET_SIZE(items);
        PyObject *out = PyList_New(n);
        for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
            PyObject *item = quick_render(self, PyTuple_GET_ITEM(items, i), 0);
            if (item == NULL) Py_CLEAR(out);
            else PyList_SET_ITEM(out, i, item);
        }
        Py_DECREF(items);
        return out;
    }
    return NULL;
}

/* render(v) of a module argument (new reference): quick_render, or else the trace's
 * render() (a Cache object, a tensor no recorded op produced, a long list), run under
 * DisableTorchFunction as _Trace.enter_module / exit_module run it: *guard holds the
 * guard entered on the first such value, for the caller to leave (disabled_exit). */
static PyObject *module_render(Recorder *self, PyObject *v, PyObject **guard) {
    PyObject *item = quick_render(self, v, 1);
    if (item != NULL || PyErr_Occurred()) return item;
    if (*guard == NULL && (*guard = disabled_enter(self->disable)) == NULL) return NULL;
    return PyObject_CallMethodOneArg(self->trace, s_render, v);
}

/* 1 when the hook can go on here: the scope is active, outside every blackbox, with no
 * hook-order recorder, and `module` is a traced module other than the root and not a
 * blackbox; *path then holds its path (new reference). 0: leave it to Python (also
 * for an inactive scope: the Python hook returns at once). -1 on error. */
static int ordinary_module(Recorder *self, PyObject *module, PyObject **path) {
    PyObject *v = PyObject_GetAttr(self->scope, s_active);
    if (v == NULL) return -1;
    int active = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (active <= 0) return active;
    v = PyObject_GetAttr(self->scope, s_blackbox_depth);
    if (v == NULL) return -1;
    int inside = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (inside != 0) return inside < 0 ? -1 : 0;
    v = PyObject_GetAttr(self->scope, s_on_event);
    if (v == NULL) return -1;
    int events = v != Py_None;
    Py_DECREF(v);
    if (events) return 0;
    PyObject *names = PyObject_GetAttr(self->scope, s_names);
    if (names == NULL) return -1;
    if (!PyDict_CheckExact(names)) {
        Py_DECREF(names);
        return 0;
    }
    PyObject *found = PyDict_GetItemWithError(names, module);
    Py_XINCREF(found);
    Py_DECREF(names);
    if (found == NULL) return PyErr_Occurred() ? -1 : 0;
    int named = PyUnicode_Check(found) && PyUnicode_GET_LENGTH(found) > 0;
    int boxed = named ? PySet_Contains(self->blackboxes, module) : 0;
    if (!named || boxed != 0) {
        Py_DECREF(found);
        return boxed < 0 ? -1 : 0;
    }
    *path = found;
    return 1;
}

/* pre(module, args): ModuleScope._pre and _Trace._enter_module for an ordinary module;
 * scope._pre otherwise. */
static PyObject *Recorder_pre(Recorder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_CheckExact(args[1]))
        return PyObject_Vectorcall(self->py_pre, args, nargs, NULL);
    PyObject *module = args[0], *margs = args[1], *path = NULL;
    int ok = ordinary_module(self, module, &path);
    if (ok < 0) return NULL;
    if (ok == 0) return PyObject_Vectorcall(self->py_pre, args, nargs, NULL);
    /* as ModuleScope._pre: the call counted and the scope entered before the arguments
     * are rendered (a render() that raises leaves the scope as Python's does, which the
     * always_call forward hook's exception path then leaves) */
    PyObject *rendered = NULL, *label = NULL, *node = NULL, *kind = NULL;
    PyObject *result = NULL, *guard = NULL;
    Py_ssize_t k;
    if (next_index(self->calls, path, &k) < 0) goto done;
    label = k <= 0 ? Py_NewRef(path) : indexed(path, '@', k);
    if (label == NULL) goto done;
    PyObject *stack = PyObject_GetAttr(self->scope, s_stack);
    if (stack == NULL) goto done;
    int failed = !PyList_CheckExact(stack) || PyList_Append(stack, label) < 0;
    Py_DECREF(stack);
    if (failed) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "ModuleScope.stack must be a list");
        goto done;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(margs);
    rendered = PyList_New(n);
    if (rendered == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = module_render(self, PyTuple_GET_ITEM(margs, i), &guard);
        if (item == NULL) break;
        PyList_SET_ITEM(rendered, i, item);
    }
    if (guard != NULL && disabled_exit(guard) < 0) goto done;
    if (PyErr_Occurred()) goto done;
    kind = PyObject_GetAttr((PyObject *)Py_TYPE(module), s_name);
    if (kind == NULL) goto done;
    node = new_node(self->node_type, label, s_module, kind, rendered, NULL, NULL, NULL);
    if (node == NULL || PyDict_SetItem(self->module_nodes, label, node) < 0 ||
        PyList_Append(self->nodes, node) < 0)
        goto done;
    result = Py_NewRef(Py_None);
done:
    Py_DECREF(path);
    Py_XDECREF(rendered);
    Py_XDECREF(label);
    Py_XDECREF(kind);
    Py_XDECREF(node);
    return result;
}

/* {"ref", "shape", "dtype"} of a module output tensor labelled by a recorded op and
 * unchanged since (_Trace.describe_outputs); NULL with no error set where Python must
 * describe it. Runs under DisableTorchFunction (the caller's). */
static PyObject *describe_leaf(Recorder *self, PyObject *leaf) {
    int error = 0;
    PyObject *entry = live_entry(self, leaf, NULL, &error);
    if (error || entry == NULL) return NULL;
    Py_INCREF(entry);
    PyObject *out = NULL, *sizes = NULL, *dtype = NULL, *name = NULL;
    PyObject *version = PyObject_GetAttr(leaf, s_version);
    if (version == NULL) goto done;
    int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(entry, 3), version, Py_EQ);
    if (eq <= 0) goto done; /* written in place by no recorded op: Python labels it */
    sizes = shape_list(leaf);
    dtype = sizes == NULL ? NULL : PyObject_GetAttr(leaf, s_dtype);
    if (dtype == NULL) goto done;
    name = dtype_label(self, dtype);
    if (name == NULL) goto done;
    out = PyDict_New();
    if (out != NULL && (PyDict_SetItem(out, s_ref, PyTuple_GET_ITEM(entry, 1)) < 0 ||
                        PyDict_SetItem(out, s_shape, sizes) < 0 ||
                        PyDict_SetItem(out, s_dtype, name) < 0))
        Py_CLEAR(out);
done:
    Py_DECREF(entry);
    Py_XDECREF(version);
    Py_XDECREF(sizes);
    Py_XDECREF(dtype);
    Py_XDECREF(name);
    return out;
}

/* The module node's outputs (new list), or NULL with no error set where Python must
 * describe them: one tensor, or an exact tuple or list of tensors and None. */
static PyObject *describe_output(Recorder *self, PyObject *output) {
    int single = PyObject_IsInstance(output, self->tensor_type);
    if (single < 0) return NULL;
    if (!single && !PyTuple_CheckExact(output) && !PyList_CheckExact(output)) return NULL;
    PyObject *items = single ? PyTuple_Pack(1, output) : items_of(output);
    if (items == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    PyObject *entries = PyList_New(n);
    if (entries == NULL) {
        Py_DECREF(items);
        return NULL;
    }
    PyObject *guard = disabled_enter(self->disable);
    if (guard == NULL) {
        Py_DECREF(entries);
        Py_DECREF(items);
        return NULL;
    }
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *leaf = PyTuple_GET_ITEM(items, i);
        PyObject *item = NULL;
        if (leaf == Py_None) {
            item = Py_NewRef(Py_None);
        } else {
            int is_tensor = PyObject_IsInstance(leaf, self->tensor_type);
            if (is_tensor > 0) item = describe_leaf(self, leaf);
        }
        if (item == NULL) ok = 0;
        else PyList_SET_ITEM(entries, i, item);
    }
    Py_DECREF(items);
    if (disabled_exit(guard) < 0 || !ok) {
        Py_DECREF(entries);
        return NULL;
    }
    return entries;
}

/* post(module, args, kwargs, output): ModuleScope._post and _Trace._exit_module for an
 * ordinary module whose outputs are quick to describe (a tensor, a tuple or list of
 * tensors and None); scope._post otherwise (also for the (module, args, output) call of
 * the exception path). */
static PyObject *Recorder_post(Recorder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyDict_CheckExact(args[2]))
        return PyObject_Vectorcall(self->py_post, args, nargs, NULL);
    PyObject *module = args[0], *kwargs = args[2], *output = args[3], *path = NULL;
    int ok = ordinary_module(self, module, &path);
    if (ok < 0) return NULL;
    if (ok == 0) return PyObject_Vectorcall(self->py_post, args, nargs, NULL);
    PyObject *stack = NULL, *label = NULL, *rendered = NULL, *outputs = NULL;
    PyObject *result = NULL;
    stack = PyObject_GetAttr(self->scope, s_stack);
    if (stack == NULL) goto done;
    if (!PyList_CheckExact(stack) || PyList_GET_SIZE(stack) == 0) {
        result = PyObject_Vectorcall(self->py_post, args, nargs, NULL);
        goto done;
    }
    label = Py_NewRef(PyList_GET_ITEM(stack, PyList_GET_SIZE(stack) - 1));
    PyObject *node = PyDict_GetItemWithError(self->module_nodes, label);
    if (node == NULL) {
        if (PyErr_Occurred()) goto done;
        result = PyObject_Vectorcall(self->py_post, args, nargs, NULL);
        goto done;
    }
    Py_INCREF(node);
    /* the outputs first (no side effect: where they need one, Python describes them),
     * then, as ModuleScope._post, the scope left before the keyword arguments are
     * rendered: a render() that raises leaves the stack as Python's does */
    outputs = describe_output(self, output);
    if (outputs == NULL) {
        if (!PyErr_Occurred()) result = PyObject_Vectorcall(self->py_post, args, nargs, NULL);
        goto node_done;
    }
    if (PyList_SetSlice(stack, PyList_GET_SIZE(stack) - 1, PyList_GET_SIZE(stack), NULL) < 0)
        goto node_done;
    if (PyDict_GET_SIZE(kwargs) > 0) {
        rendered = PyDict_New();
        if (rendered == NULL) goto node_done;
        /* a snapshot of the items: render() runs Python code between them */
        PyObject *items = PyDict_Items(kwargs), *guard = NULL;
        if (items == NULL) goto node_done;
        int failed = 0;
        for (Py_ssize_t i = 0; !failed && i < PyList_GET_SIZE(items); i++) {
            PyObject *key = PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 0);
            PyObject *value = PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 1);
            if (value == Py_None) continue; /* optional inputs left at None */
            PyObject *item = module_render(self, value, &guard);
            failed = item == NULL || PyDict_SetItem(rendered, key, item) < 0;
            Py_XDECREF(item);
        }
        Py_DECREF(items);
        if (guard != NULL && disabled_exit(guard) < 0) failed = 1;
        if (failed) goto node_done;
        /* as _exit_module: the references the tensors had when the call began */
        if (PyDict_GET_SIZE(self->relabelled) > 0) {
            PyObject *at_entry =
                PyObject_CallMethodObjArgs(self->trace, s_kwargs_at_entry, node, rendered, NULL);
            if (at_entry == NULL) goto node_done;
            Py_SETREF(rendered, at_entry);
        }
        if (PyObject_SetAttr(node, s_kwargs, rendered) < 0) goto node_done;
    }
    if (PyObject_SetAttr(node, s_outputs, outputs) < 0) goto node_done;
    result = Py_NewRef(Py_None);
node_done:
    Py_DECREF(node);
done:
    Py_DECREF(path);
    Py_XDECREF(stack);
    Py_XDECREF(label);
    Py_XDECREF(rendered);
    Py_XDECREF(outputs);
    return result;
}

static PyMethodDef Recorder_methods[] = {
    {"pre", (PyCFunction)(void (*)(void))Recorder_pre, METH_FASTCALL,
     "pre(module, args): the global forward pre-hook (ModuleScope._pre + enter_module)"},
    {"post", (PyCFunction)(void (*)(void))Recorder_post, METH_FASTCALL,
     "post(module, args, kwargs, output): the global forward hook (ModuleScope._post + "
     "exit_module)"},
    {NULL, NULL, 0, NULL},
};

static PyObject *Recorder_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames) {
    Recorder *self = (Recorder *)obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs != 5) goto python;
    PyObject *op = args[0], *raw = args[1], *targs = args[2], *kwargs = args[3], *out = args[4];
    PyObject *depth = PyObject_GetAttr(self->scope, s_blackbox_depth);
    if (depth == NULL) return NULL;
    int inside = PyObject_IsTrue(depth);
    Py_DECREF(depth);
    if (inside < 0) return NULL;
    if (inside) Py_RETURN_NONE; /* inside a blackbox module */
    if (!Py_IS_TYPE(out, (PyTypeObject *)self->tensor_type) || !PyUnicode_CheckExact(op) ||
        !PyTuple_CheckExact(targs) || !PyDict_CheckExact(kwargs))
        goto python;
    int slow = PySet_Contains(self->python_ops, op);
    if (slow < 0) return NULL;
    if (slow) {
        /* dropout & co. in eval mode (or p=0) are ordinary ops: naming.is_random_call
         * says so, as _Trace._unstable asks it */
        int maybe = PySet_Contains(self->random_ops, op);
        if (maybe <= 0) {
            if (maybe < 0) return NULL;
            goto python;
        }
        PyObject *rargs[3] = {op, targs, kwargs};
        PyObject *random = PyObject_Vectorcall(self->is_random, rargs, 3, NULL);
        int drawn = random == NULL ? -1 : PyObject_IsTrue(random);
        Py_XDECREF(random);
        if (drawn < 0) PyErr_Clear(); /* record_op raises it, after adding the node */
        if (drawn != 0) goto python;
    }
    /* a user's TorchFunctionMode under the tracer's would see every tensor query */
    PyObject *enabled = PyObject_CallNoArgs(self->mode_enabled);
    if (enabled == NULL) return NULL;
    int on = PyObject_IsTrue(enabled);
    Py_DECREF(enabled);
    if (on < 0) return NULL;
    if (on) goto python;
    return record(self, op, raw, targs, kwargs, out);
python:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject **field(Recorder *self, int i) {
    return &self->fallback + i;
}

static int Recorder_traverse(Recorder *self, visitproc visit, void *arg) {
    for (int i = 0; i < N_FIELDS + 2; i++) Py_VISIT(*field(self, i));
    return 0;
}

static int Recorder_clear(Recorder *self) {
    for (int i = 0; i < N_FIELDS + 2; i++) Py_CLEAR(*field(self, i));
    return 0;
}

static void Recorder_dealloc(Recorder *self) {
    PyObject_GC_UnTrack(self);
    Recorder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Recorder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "Recorder() takes positional arguments only");
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != N_FIELDS) {
        PyErr_Format(PyExc_TypeError, "Recorder() takes %d arguments, got %zd", N_FIELDS,
                     PyTuple_GET_SIZE(args));
        return NULL;
    }
    Recorder *self = (Recorder *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = Recorder_vectorcall;
    for (int i = 0; i < N_FIELDS; i++) *field(self, i) = Py_NewRef(PyTuple_GET_ITEM(args, i));
    self->bases = PyDict_New();
    self->dtypes = PyDict_New();
    if (self->bases == NULL || self->dtypes == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    const char *problem = NULL;
    if (!PyDict_CheckExact(self->entries) || !PyDict_CheckExact(self->counters) ||
        !PyDict_CheckExact(self->fused_codes) || !PyDict_CheckExact(self->module_nodes) ||
        !PyDict_CheckExact(self->calls) || !PyDict_CheckExact(self->relabelled))
        problem = "entries, counters, fused_codes, module_nodes, calls and relabelled must be "
                  "dicts";
    else if (!PyList_CheckExact(self->nodes)) problem = "nodes must be a list";
    else if (!PyAnySet_Check(self->unqueued) || !PyAnySet_Check(self->python_ops) ||
             !PyAnySet_Check(self->same) || !PyAnySet_Check(self->blackboxes) ||
             !PyAnySet_Check(self->named) || !PyAnySet_Check(self->random_ops))
        problem = "unqueued, python_ops, same, blackboxes, named and random_ops must be sets";
    else if (!PyType_Check(self->tensor_type)) problem = "tensor_type must be a type";
    if (problem != NULL) {
        PyErr_SetString(PyExc_TypeError, problem);
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pytest_graphir.capture._record.Recorder",
    .tp_basicsize = sizeof(Recorder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Recorder(fallback, trace, labels_ref, entries, counters, nodes, scope, "
              "unqueued, python_ops, same, node_type, meta_type, tensor_type, op_node_base, "
              "dtype_name, mode_enabled, tensor_stats, fused_codes, strided, module_nodes, "
              "calls, blackboxes, py_pre, py_post, disable, dtype_type, named, device_type, "
              "random_ops, is_random, relabelled): "
              "record(op, raw, args, kwargs, out) in C for the common case, fallback(...) "
              "otherwise (see pytest_graphir.capture.tracer).",
    .tp_vectorcall_offset = offsetof(Recorder, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = Recorder_new,
    .tp_methods = Recorder_methods,
    .tp_traverse = (traverseproc)Recorder_traverse,
    .tp_clear = (inquiry)Recorder_clear,
    .tp_dealloc = (destructor)Recorder_dealloc,
};

/* -- Handler: RecordingMode.__torch_function__ in C ---------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *mode;         /* weak reference to the RecordingMode (this handler's
                             * __self__), which holds this handler: no cycle */
    PyObject *ops;          /* mode._OPS: callable -> (name, qualified name, write class) */
    PyObject *op_info;      /* mode.op_info: fills _OPS */
    PyObject *never;        /* writes.NEVER */
    PyObject *writes;       /* writes.writes(write class, args, kwargs) */
    PyObject *before_write; /* the mode's before_write, or None */
    PyObject *record;       /* the mode's record */
    PyObject *python;       /* RecordingMode.__torch_function__ bound to the mode */
} Handler;

#define HANDLER_FIELDS 8

static PyObject *Handler_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames) {
    Handler *self = (Handler *)obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs < 2 || nargs > 4 ||
        (nargs > 2 && !PyTuple_CheckExact(args[2])))
        return PyObject_Vectorcall(self->python, args, nargsf, kwnames);
    PyObject *func = args[0];
    PyObject *targs = nargs > 2 ? Py_NewRef(args[2]) : PyTuple_New(0);
    if (targs == NULL) return NULL;
    PyObject *kwargs = nargs > 3 && args[3] != Py_None ? Py_NewRef(args[3]) : PyDict_New();
    PyObject *info = NULL, *out = NULL;
    if (kwargs == NULL) goto done;
    if (!PyDict_Check(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "__torch_function__: kwargs must be a dict or None");
        goto done;
    }
    info = PyDict_GetItemWithError(self->ops, func);
    if (info != NULL) {
        Py_INCREF(info);
    } else {
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) goto done;
            PyErr_Clear(); /* an unhashable callable: op_info resolves it every time */
        }
        info = PyObject_CallOneArg(self->op_info, func);
        if (info == NULL) goto done;
    }
    if (!PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 3) {
        PyErr_SetString(PyExc_TypeError, "op_info() must return a 3-tuple");
        goto done;
    }
    PyObject *name = PyTuple_GET_ITEM(info, 0), *raw = PyTuple_GET_ITEM(info, 1);
    PyObject *write = PyTuple_GET_ITEM(info, 2);
    if (self->before_write != Py_None) {
        int maybe = PyDict_GET_SIZE(kwargs) > 0;
        if (!maybe) {
            maybe = PyObject_RichCompareBool(write, self->never, Py_NE);
            if (maybe < 0) goto done;
        }
        if (maybe) {
            PyObject *wargs[3] = {write, targs, kwargs};
            PyObject *will = PyObject_Vectorcall(self->writes, wargs, 3, NULL);
            if (will == NULL) goto done;
            int truth = PyObject_IsTrue(will);
            Py_DECREF(will);
            if (truth < 0) goto done;
            if (truth) {
                PyObject *flushed = PyObject_CallNoArgs(self->before_write);
                if (flushed == NULL) goto done;
                Py_DECREF(flushed);
            }
        }
    }
    out = PyObject_Call(func, targs, kwargs);
    if (out == NULL || name == Py_None) goto done;
    PyObject *mode = deref(self->mode);
    if (mode == NULL) {
        Py_CLEAR(out);
        goto done;
    }
    PyObject *active = mode == Py_None ? Py_NewRef(Py_False) : PyObject_GetAttr(mode, s_active);
    Py_DECREF(mode);
    int on = active == NULL ? -1 : PyObject_IsTrue(active);
    Py_XDECREF(active);
    if (on > 0) {
        PyObject *rargs[5] = {name, raw, targs, kwargs, out};
        PyObject *done_ = PyObject_Vectorcall(self->record, rargs, 5, NULL);
        if (done_ == NULL) on = -1;
        Py_XDECREF(done_);
    }
    if (on < 0) Py_CLEAR(out);
done:
    Py_DECREF(targs);
    Py_XDECREF(kwargs);
    Py_XDECREF(info);
    return out;
}

static PyObject **handler_field(Handler *self, int i) {
    return &self->mode + i;
}

static int Handler_traverse(Handler *self, visitproc visit, void *arg) {
    for (int i = 0; i < HANDLER_FIELDS; i++) Py_VISIT(*handler_field(self, i));
    return 0;
}

static int Handler_clear(Handler *self) {
    for (int i = 0; i < HANDLER_FIELDS; i++) Py_CLEAR(*handler_field(self, i));
    return 0;
}

static void Handler_dealloc(Handler *self) {
    PyObject_GC_UnTrack(self);
    Handler_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Handler_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) ||
        PyTuple_GET_SIZE(args) != HANDLER_FIELDS) {
        PyErr_Format(PyExc_TypeError, "Handler() takes %d positional arguments",
                     HANDLER_FIELDS);
        return NULL;
    }
    if (!PyDict_CheckExact(PyTuple_GET_ITEM(args, 1))) {
        PyErr_SetString(PyExc_TypeError, "Handler(): ops must be a dict");
        return NULL;
    }
    if (!PyWeakref_CheckRef(PyTuple_GET_ITEM(args, 0))) {
        PyErr_SetString(PyExc_TypeError, "Handler(): mode must be a weak reference");
        return NULL;
    }
    Handler *self = (Handler *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = Handler_vectorcall;
    for (int i = 0; i < HANDLER_FIELDS; i++)
        *handler_field(self, i) = Py_NewRef(PyTuple_GET_ITEM(args, i));
    return (PyObject *)self;
}

static PyObject *Handler_self(Handler *self, void *closure) {
    return deref(self->mode);
}

static PyGetSetDef Handler_getset[] = {
    /* torch checks that a mode's __torch_function__ is bound to the mode */
    {"__self__", (getter)Handler_self, NULL, "the RecordingMode", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HandlerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pytest_graphir.capture._record.Handler",
    .tp_basicsize = sizeof(Handler),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Handler(weakref to mode, ops, op_info, never, writes, before_write, record, "
              "python): RecordingMode.__torch_function__(func, types, args=(), kwargs=None) in C "
              "(see pytest_graphir.capture.mode).",
    .tp_vectorcall_offset = offsetof(Handler, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = Handler_new,
    .tp_getset = Handler_getset,
    .tp_traverse = (traverseproc)Handler_traverse,
    .tp_clear = (inquiry)Handler_clear,
    .tp_dealloc = (destructor)Handler_dealloc,
};

/* -- name_tensors: _Trace._name_tensors in C ----------------------------------------- */

typedef struct {
    PyObject *names, *entries, *named, *unqueued, *meta_type, *dtype_name, *lazy_type,
        *check, *named_modules, *dtypes, *what, *own, *object_getattribute;
} Walk;

/* getattr(module, name) for an attribute nn.Module keeps in the instance __dict__
 * (_parameters, _buffers, _modules), read from that dict (new reference): a getattr
 * first looks the name up along the class's MRO (with python_walk_class below, the
 * walk of ResNet-50 went from 0.41 to 0.37 ms). python_walk_class has checked that the
 * class reads attributes as object does and defines none of these names; where the
 * dict lacks one, getattr. */
static PyObject *instance_attr(PyObject *module, PyObject *name) {
    PyObject *dict = PyObject_GenericGetDict(module, NULL);
    if (dict == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
        PyErr_Clear();
        return PyObject_GetAttr(module, name);
    }
    PyObject *value = PyDict_Check(dict) ? PyDict_GetItemWithError(dict, name) : NULL;
    Py_XINCREF(value);
    Py_DECREF(dict);
    if (value == NULL && !PyErr_Occurred()) return PyObject_GetAttr(module, name);
    return value;
}

/* 1 when type(module) needs the Python walk (decided once per class, in w->own): it
 * overrides nn.Module.named_modules, or __getattribute__, or defines _parameters,
 * _buffers or _modules on the class (instance_attr would then not be getattr). 0 when
 * not, -1 on error. */
static int python_walk_class(Walk *w, PyObject *module) {
    PyObject *type = (PyObject *)Py_TYPE(module);
    PyObject *known = PyDict_GetItemWithError(w->own, type);
    if (known != NULL) return known == Py_True;
    if (PyErr_Occurred()) return -1;
    PyObject *method = PyObject_GetAttr(type, s_named_modules);
    if (method == NULL) return -1;
    int own = method != w->named_modules;
    Py_DECREF(method);
    if (!own) {
        PyObject *get = PyObject_GetAttr(type, s_getattribute);
        if (get == NULL) return -1;
        own = get != w->object_getattribute;
        Py_DECREF(get);
    }
    PyObject *names[3] = {s_parameters, s_buffers, s_modules};
    for (int i = 0; !own && i < 3; i++) own = PyObject_HasAttr(type, names[i]);
    if (PyDict_SetItem(w->own, type, own ? Py_True : Py_False) < 0) return -1;
    return own;
}

#define MAX_WALK_DEPTH 200

/* 1 done, 0 a module's class needs the Python walk (python_walk_class) or the tree is
 * deeper than MAX_WALK_DEPTH (the caller walks in Python), -1 error */
static int walk_module(Walk *w, PyObject *module, PyObject *prefix, int depth) {
    if (depth > MAX_WALK_DEPTH) return 0;
    int seen = PyDict_Contains(w->names, module); /* walked under an earlier name */
    if (seen != 0) return seen < 0 ? -1 : 1;
    int own = python_walk_class(w, module);
    if (own != 0) return own < 0 ? -1 : 0;
    if (PyDict_SetItem(w->names, module, prefix) < 0) return -1;
    /* "$<prefix>." (or "$" at the root): each tensor's label is it + the tensor's name */
    int root = PyUnicode_GET_LENGTH(prefix) == 0;
    PyObject *head = root ? Py_NewRef(s_prefix) : PyUnicode_FromFormat("$%U.", prefix);
    if (head == NULL) return -1;
    PyObject *groups[2] = {s_parameters, s_buffers};
    for (int g = 0; g < 2; g++) {
        PyObject *tensors = instance_attr(module, groups[g]);
        if (tensors == NULL) {
            Py_DECREF(head);
            return -1;
        }
        if (!PyDict_Check(tensors)) {
            Py_DECREF(tensors);
            Py_DECREF(head);
            return 0;
        }
        Py_ssize_t pos = 0;
        PyObject *tname, *t;
        int status = 1;
        while (status == 1 && PyDict_Next(tensors, &pos, &tname, &t)) {
            if (t == Py_None) continue;
            PyObject *key = PyLong_FromVoidPtr(t);
            if (key == NULL) {
                status = -1;
                break;
            }
            int known = PyDict_Contains(w->entries, key); /* labelled by another module */
            int lazy = known == 0 ? PyObject_IsInstance(t, w->lazy_type) : 0;
            if (known != 0 || lazy != 0) { /* lazy: no shape until the forward */
                Py_DECREF(key);
                if (known < 0 || lazy < 0) status = -1;
                continue;
            }
            PyObject *qualified = NULL, *label = NULL, *sizes = NULL, *dtype = NULL,
                     *name = NULL, *meta = NULL, *weak = NULL, *version = NULL,
                     *inference = NULL, *meta_id = NULL;
            status = -1;
            label = PyUnicode_Concat(head, tname);
            if (label == NULL) goto next;
            inference = PyObject_CallMethodNoArgs(t, s_is_inference);
            if (inference == NULL) goto next;
            if (inference == Py_True) { /* raises the tracer's own message */
                qualified = PyUnicode_Substring(label, 1, PyUnicode_GET_LENGTH(label));
                if (qualified == NULL) goto next;
                PyObject *raised = PyObject_CallFunctionObjArgs(w->check, t, w->what,
                                                                qualified, NULL);
                Py_XDECREF(raised);
                if (raised != NULL)
                    PyErr_SetString(PyExc_RuntimeError, "inference tensor not refused");
                goto next;
            }
            sizes = shape_list(t);
            dtype = sizes == NULL ? NULL : PyObject_GetAttr(t, s_dtype);
            if (dtype == NULL) goto next;
            name = cached_call(w->dtypes, w->dtype_name, dtype);
            if (name == NULL) goto next;
            meta = new_tensor_meta(w->meta_type, sizes, name, NULL);
            weak = meta == NULL ? NULL : PyWeakref_NewRef(t, NULL);
            version = weak == NULL ? NULL : PyObject_GetAttr(t, s_version);
            meta_id = version == NULL ? NULL : PyLong_FromVoidPtr(meta);
            if (meta_id == NULL || put_entry(w->entries, key, weak, label, meta, version) < 0 ||
                PySet_Add(w->named, label) < 0 || PySet_Add(w->unqueued, meta_id) < 0)
                goto next;
            status = 1;
        next:
            Py_DECREF(key);
            Py_XDECREF(qualified);
            Py_XDECREF(label);
            Py_XDECREF(sizes);
            Py_XDECREF(dtype);
            Py_XDECREF(name);
            Py_XDECREF(meta);
            Py_XDECREF(weak);
            Py_XDECREF(version);
            Py_XDECREF(inference);
            Py_XDECREF(meta_id);
        }
        Py_DECREF(tensors);
        if (status != 1) {
            Py_DECREF(head);
            return status;
        }
    }
    Py_DECREF(head);
    PyObject *children = instance_attr(module, s_modules);
    if (children == NULL) return -1;
    if (!PyDict_Check(children)) {
        Py_DECREF(children);
        return 0;
    }
    /* a snapshot of the items: a child's walk runs no model code, but be safe */
    PyObject *items = PyDict_Items(children);
    Py_DECREF(children);
    if (items == NULL) return -1;
    int status = 1;
    PyObject *dot = root ? NULL : PyUnicode_FromFormat("%U.", prefix); /* children's head */
    if (!root && dot == NULL) status = -1;
    for (Py_ssize_t i = 0; status == 1 && i < PyList_GET_SIZE(items); i++) {
        PyObject *pair = PyList_GET_ITEM(items, i);
        PyObject *cname = PyTuple_GET_ITEM(pair, 0), *child = PyTuple_GET_ITEM(pair, 1);
        if (child == Py_None) continue;
        PyObject *path = root ? Py_NewRef(cname) : PyUnicode_Concat(dot, cname);
        if (path == NULL) {
            status = -1;
            break;
        }
        status = walk_module(w, child, path, depth + 1);
        Py_DECREF(path);
    }
    Py_XDECREF(dot);
    Py_DECREF(items);
    return status;
}

static PyObject *name_tensors(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "name_tensors() takes 11 arguments, got %zd", nargs);
        return NULL;
    }
    Walk w = {args[1], args[2], args[3], args[4], args[5], args[6], args[7],
              args[8], args[9], NULL,    NULL,    NULL,    NULL};
    PyObject *disable = args[10];
    if (!PyDict_CheckExact(w.names) || !PyDict_CheckExact(w.entries) ||
        !PyAnySet_Check(w.named) || !PyAnySet_Check(w.unqueued)) {
        PyErr_SetString(PyExc_TypeError, "name_tensors(): names and entries must be dicts, "
                                         "named and unqueued sets");
        return NULL;
    }
    if (PyDict_GET_SIZE(w.names) != 0 || PyDict_GET_SIZE(w.entries) != 0) {
        /* they double as the walk's memo of modules and tensors seen */
        PyErr_SetString(PyExc_ValueError, "name_tensors(): names and entries must be empty");
        return NULL;
    }
    w.dtypes = PyDict_New();
    w.what = PyUnicode_FromString("parameter or buffer");
    w.own = PyDict_New();
    w.object_getattribute = PyObject_GetAttr((PyObject *)&PyBaseObject_Type, s_getattribute);
    PyObject *guard, *result = NULL;
    if (w.dtypes == NULL || w.what == NULL || w.own == NULL || w.object_getattribute == NULL)
        goto done;
    guard = disabled_enter(disable);
    if (guard == NULL) goto done;
    PyObject *empty = PyUnicode_FromString("");
    int status = empty == NULL ? -1 : walk_module(&w, args[0], empty, 0);
    Py_XDECREF(empty);
    if (disabled_exit(guard) == 0 && status >= 0) result = PyBool_FromLong(status);
done:
    Py_XDECREF(w.dtypes);
    Py_XDECREF(w.what);
    Py_XDECREF(w.own);
    Py_XDECREF(w.object_getattribute);
    return result;
}

static PyMethodDef module_methods[] = {
    {"name_tensors", (PyCFunction)(void (*)(void))name_tensors, METH_FASTCALL,
     "name_tensors(model, names, entries, named, unqueued, meta_type, dtype_name, "
     "lazy_type, check_not_inference, named_modules, disable) -> bool: "
     "_Trace._name_tensors in C; False where a module overrides named_modules"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record",
    "The tracer's per-op callback in C (pytest_graphir.capture.tracer, Recorder).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__record(void) {
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&s_blackbox_depth, "blackbox_depth"}, {&s_stack, "stack"},
        {&s_stats, "stats"},                   {&s_shape, "shape"},
        {&s_dtype, "dtype"},                   {&s_version, "_version"},
        {&s_add, "add"},                       {&s_render, "render"},
        {&s_new_meta, "new_meta"},             {&s_output_meta, "_output_meta"},
        {&s_numel, "numel"},                   {&s_op, "op"},
        {&s_prefix, "$"},                      {&s_batched, "_batched"},
        {&s_is_cpu, "is_cpu"},                 {&s_layout, "layout"},
        {&s_is_nested, "is_nested"},           {&s_kwargs_at_entry, "kwargs_at_entry"},
        {&s_add_unfused, "add_unfused"},       {&s_active, "active"},
        {&s_on_event, "on_event"},             {&s_names, "names"},
        {&s_name, "__name__"},                 {&s_module, "module"},
        {&s_kwargs, "kwargs"},                 {&s_outputs, "outputs"},
        {&s_ref, "ref"},                       {&s_enter, "__enter__"},
        {&s_exit, "__exit__"},                 {&s_named_modules, "named_modules"},
        {&s_parameters, "_parameters"},        {&s_buffers, "_buffers"},
        {&s_modules, "_modules"},              {&s_is_inference, "is_inference"},
        {&s_device, "<device>"},                {&s_empty, ""},
        {&s_getattribute, "__getattribute__"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (*names[i].slot == NULL) {
            *names[i].slot = PyUnicode_InternFromString(names[i].text);
            if (*names[i].slot == NULL) return NULL;
        }
    }
    if (PyType_Ready(&RecorderType) < 0 || PyType_Ready(&HandlerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&RecorderType);
    if (PyModule_AddObject(m, "Recorder", (PyObject *)&RecorderType) < 0) {
        Py_DECREF(&RecorderType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAX_CONST_LIST", MAX_CONST_LIST) < 0 ||
        PyModule_AddObjectRef(m, "REF_PREFIX", s_prefix) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&HandlerType);
    if (PyModule_AddObject(m, "Handler", (PyObject *)&HandlerType) < 0) {
        Py_DECREF(&HandlerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
