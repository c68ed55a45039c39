/*
 * _playground_native.Span and null_span: the trace's spans (playground/trace.py) with no Python frame.
 *
 * Why C: `with tracer.span("rd.exchange", ...)` runs once or twice in every all-reduce, and as
 * Python (a method, an __init__, an __enter__ and an __exit__) it cost 0.9 us recorded and 0.26 us
 * when tracing is off, against a few microseconds for a whole 8-byte all-reduce on shared memory.
 * Here a Tracer binds `span` to functools.partial(Span, tracer) (or to `null_span` when it records
 * nothing), so opening and closing a span are C calls.
 *
 * Span(tracer, name, cat="compute", **args): __enter__ reads tracer.clock_ns() (the rank's time
 * source, virtual in the simulator; looked up once, when the span is made); __exit__ reads it again and appends to tracer._events the
 * same record as trace.py's Python form: (t0_ns, t1_ns, name, cat, thread ident, args, SPAN_MARK),
 * where SPAN_MARK is the object trace.py passes to `set_span_mark` (flush tells spans by it).
 * null_span(*args, **kwargs) returns one shared span that does nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

static PyObject *span_mark = NULL; /* trace._SPAN */
static PyObject *default_cat = NULL; /* "compute" */
static PyObject *str_clock_ns = NULL, *str_events = NULL, *str_cat = NULL;

typedef struct {
    PyObject_HEAD
    PyObject *tracer, *clock, *name, *cat, *args, *t0;
} Span;

static void Span_dealloc(Span *self) {
    Py_XDECREF(self->tracer);
    Py_XDECREF(self->clock);
    Py_XDECREF(self->name);
    Py_XDECREF(self->cat);
    Py_XDECREF(self->args);
    Py_XDECREF(self->t0);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Span_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 2 || n > 3) {
        PyErr_SetString(PyExc_TypeError, "Span(tracer, name, cat='compute', **args)");
        return NULL;
    }
    PyObject *cat = n == 3 ? PyTuple_GET_ITEM(args, 2) : NULL;
    PyObject *rest = NULL;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyObject *kwcat = PyDict_GetItemWithError(kwds, str_cat);
        if (!kwcat && PyErr_Occurred()) return NULL;
        if (kwcat) {
            if (cat) {
                PyErr_SetString(PyExc_TypeError, "Span: cat given twice");
                return NULL;
            }
            cat = kwcat;
            rest = PyDict_Copy(kwds);
            if (!rest || PyDict_DelItem(rest, str_cat) < 0) {
                Py_XDECREF(rest);
                return NULL;
            }
        } else {
            rest = Py_NewRef(kwds);
        }
    } else {
        rest = PyDict_New();
        if (!rest) return NULL;
    }
    PyObject *clock = PyObject_GetAttr(PyTuple_GET_ITEM(args, 0), str_clock_ns); /* read once a span */
    Span *self = clock ? (Span *)type->tp_alloc(type, 0) : NULL;
    if (!self) {
        Py_XDECREF(clock);
        Py_DECREF(rest);
        return NULL;
    }
    self->clock = clock;
    self->tracer = Py_NewRef(PyTuple_GET_ITEM(args, 0));
    self->name = Py_NewRef(PyTuple_GET_ITEM(args, 1));
    self->cat = Py_NewRef(cat ? cat : default_cat);
    self->args = rest;
    self->t0 = NULL;
    return (PyObject *)self;
}

static PyObject *Span_enter(Span *self, PyObject *unused) {
    PyObject *t0 = PyObject_CallNoArgs(self->clock);
    if (!t0) return NULL;
    Py_XSETREF(self->t0, t0);
    Py_RETURN_NONE;
}

static PyObject *Span_exit(Span *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!self->t0) Py_RETURN_FALSE; /* never entered */
    PyObject *t1 = PyObject_CallNoArgs(self->clock);
    if (!t1) return NULL;
    PyObject *ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    PyObject *events = PyObject_GetAttr(self->tracer, str_events);
    PyObject *record = NULL;
    int failed = 1;
    if (ident && events) {
        record = PyTuple_Pack(7, self->t0, t1, self->name, self->cat, ident, self->args, span_mark);
        failed = !record || PyList_Append(events, record) < 0;
    }
    Py_DECREF(t1);
    Py_XDECREF(ident);
    Py_XDECREF(events);
    Py_XDECREF(record);
    if (failed) return NULL;
    Py_RETURN_FALSE;
}

static PyMethodDef Span_methods[] = {
    {"__enter__", (PyCFunction)Span_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Span_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.Span",
    .tp_basicsize = sizeof(Span),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Span(tracer, name, cat='compute', **args): one trace event for the time its `with` body takes",
    .tp_new = Span_new,
    .tp_dealloc = (destructor)Span_dealloc,
    .tp_methods = Span_methods,
};

/* The span of a tracer that records nothing: one shared object whose enter and exit do nothing. */
typedef struct {
    PyObject_HEAD
} NullSpan;

static PyObject *NullSpan_enter(PyObject *self, PyObject *unused) { Py_RETURN_NONE; }
static PyObject *NullSpan_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) { Py_RETURN_FALSE; }

static PyMethodDef NullSpan_methods[] = {
    {"__enter__", (PyCFunction)NullSpan_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))NullSpan_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject NullSpanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.NullSpan",
    .tp_basicsize = sizeof(NullSpan),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "the span of a tracer that records nothing",
    .tp_methods = NullSpan_methods,
};

static PyObject *the_null_span = NULL;

static PyObject *null_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return Py_NewRef(the_null_span);
}

static PyObject *set_span_mark(PyObject *module, PyObject *mark) {
    Py_XSETREF(span_mark, Py_NewRef(mark));
    Py_RETURN_NONE;
}

static PyMethodDef span_functions[] = {
    {"null_span", (PyCFunction)(void (*)(void))null_span, METH_FASTCALL | METH_KEYWORDS,
     "null_span(*args, **kwargs): the one span that records nothing"},
    {"set_span_mark", set_span_mark, METH_O, "set_span_mark(mark): the last field of every span's record"},
    {NULL, NULL, 0, NULL},
};

int add_span_types(PyObject *module) {
    span_mark = Py_NewRef(Py_None);
    default_cat = PyUnicode_InternFromString("compute");
    str_clock_ns = PyUnicode_InternFromString("clock_ns");
    str_events = PyUnicode_InternFromString("_events");
    str_cat = PyUnicode_InternFromString("cat");
    if (!default_cat || !str_clock_ns || !str_events || !str_cat) return -1;
    if (PyType_Ready(&SpanType) < 0 || PyType_Ready(&NullSpanType) < 0) return -1;
    the_null_span = PyObject_New(PyObject, &NullSpanType);
    if (!the_null_span) return -1;
    if (PyModule_AddFunctions(module, span_functions) < 0) return -1;
    Py_INCREF(&SpanType);
    if (PyModule_AddObject(module, "Span", (PyObject *)&SpanType) < 0) {
        Py_DECREF(&SpanType);
        return -1;
    }
    return 0;
}
