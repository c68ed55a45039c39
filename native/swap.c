/*
 * _playground_native.Swap: the shared-memory transport's `exchange` (comm/shm_transport.py) for the
 * small arrays it has seen before, without a Python frame: ShmTransport.exchange's own first lines
 * (its memo of encoded headers by (dst, src, tag, ufunc, dtype, shape), then Mailboxes.exchange), in C.
 *
 * Why: an 8-byte all-reduce over shm is one exchange per rank, a post and a landing of a few cache
 * lines (0.5 us here between two processes); the Python method in front of it cost 0.3 us of
 * building the memo's key, looking it up and passing ten arguments on. Here the key is built from
 * the array's cached attributes (getset_cache.h) and the plan read from the same dictionary the
 * Python method fills. Anything else (a key not seen yet, an array that does not travel inline and
 * so streams, a buffer that is not C-contiguous) is handed to that method, the one definition.
 *
 *   Swap(mailboxes, plans, fallback, decode, pause_ns, yield_ns)
 *   swap(dst, src, tag, buf, ufunc, timeout_ms) -> None | False | True | Message   (as exchange)
 */
#include "mailbox.h"

#include "getset_cache.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *mailboxes, *plans, *fallback, *decode;
    double pause_ns, yield_ns;
} Swap;

static PyObject *str_dtype, *str_shape;
static getset_cache dtype_of, shape_of;

static PyObject *Swap_call(Swap *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames || nargs != 6) return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *dst = args[0], *src = args[1], *tag = args[2], *buf = args[3], *ufunc = args[4];
    PyObject *dtype = getset_read(&dtype_of, buf, str_dtype);
    if (!dtype) {
        PyErr_Clear(); /* not an array: the Python method says what is wrong */
        return PyObject_Vectorcall(self->fallback, args, nargs, NULL);
    }
    PyObject *shape = getset_read(&shape_of, buf, str_shape), *key = NULL;
    if (shape) key = PyTuple_Pack(6, dst, src, tag, ufunc, dtype, shape);
    Py_DECREF(dtype);
    Py_XDECREF(shape);
    if (!key) return NULL;
    PyObject *plan = PyDict_GetItemWithError(self->plans, key); /* borrowed */
    Py_DECREF(key);
    if (!plan && PyErr_Occurred()) return NULL;
    if (!plan || !PyTuple_CheckExact(plan) || PyTuple_GET_SIZE(plan) != 3 || !PyBytes_CheckExact(PyTuple_GET_ITEM(plan, 0)) ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(plan, 1)))
        return PyObject_Vectorcall(self->fallback, args, nargs, NULL); /* first time, or a stream */
    Mailboxes *mb = (Mailboxes *)self->mailboxes;
    long d = PyLong_AsLong(dst), s = PyLong_AsLong(src), code = PyLong_AsLong(PyTuple_GET_ITEM(plan, 2));
    double timeout_ms = PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred()) return NULL;
    if (!mb->own || d < 0 || d >= mb->size || s < 0 || s >= mb->size)
        return PyObject_Vectorcall(self->fallback, args, nargs, NULL); /* closed, or a bad rank: said there */
    Py_buffer target;
    if (PyObject_GetBuffer(buf, &target, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_ValueError)) return NULL;
        PyErr_Clear();
        Py_RETURN_NONE; /* not a writable C-contiguous buffer: the usual way */
    }
    PyObject *head_out = PyTuple_GET_ITEM(plan, 0), *head_in_obj = PyTuple_GET_ITEM(plan, 1), *got;
    Py_buffer head_in = {.buf = PyBytes_AS_STRING(head_in_obj), .len = PyBytes_GET_SIZE(head_in_obj)};
    int posted = mbox_post(mb, (int)d, PyBytes_AS_STRING(head_out), (size_t)PyBytes_GET_SIZE(head_out), target.buf,
                           (size_t)target.len);
    if (posted < 0) {
        got = NULL;
    } else if (posted == 0) {
        got = Py_NewRef(Py_None);
    } else {
        got = mbox_land_into(mb, timeout_ms, self->pause_ns, self->yield_ns, s, &head_in, &target, (int)code, NULL);
        if (got == Py_None) {
            Py_DECREF(got);
            got = Py_NewRef(Py_False);
        }
    }
    PyBuffer_Release(&target);
    if (!got || got == Py_None || got == Py_True || got == Py_False) return got;
    PyObject *msg = PyObject_CallOneArg(self->decode, got); /* another message came first */
    Py_DECREF(got);
    return msg;
}

static int Swap_init(Swap *self, PyObject *args, PyObject *kwds) {
    PyObject *mailboxes, *plans, *fallback, *decode;
    double pause_ns, yield_ns;
    if (!PyArg_ParseTuple(args, "OO!OOdd", &mailboxes, &PyDict_Type, &plans, &fallback, &decode, &pause_ns, &yield_ns))
        return -1;
    if (!PyObject_TypeCheck(mailboxes, mbox_type())) {
        PyErr_SetString(PyExc_TypeError, "Swap: the first argument is the rank's Mailboxes");
        return -1;
    }
    Py_XSETREF(self->mailboxes, Py_NewRef(mailboxes));
    Py_XSETREF(self->plans, Py_NewRef(plans));
    Py_XSETREF(self->fallback, Py_NewRef(fallback));
    Py_XSETREF(self->decode, Py_NewRef(decode));
    self->pause_ns = pause_ns;
    self->yield_ns = yield_ns;
    self->vectorcall = (vectorcallfunc)Swap_call;
    return 0;
}

static int Swap_traverse(Swap *self, visitproc visit, void *arg) {
    Py_VISIT(self->mailboxes);
    Py_VISIT(self->plans);
    Py_VISIT(self->fallback);
    Py_VISIT(self->decode);
    return 0;
}

static int Swap_clear(Swap *self) {
    Py_CLEAR(self->mailboxes);
    Py_CLEAR(self->plans);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->decode);
    return 0;
}

static void Swap_dealloc(Swap *self) {
    PyObject_GC_UnTrack(self);
    Swap_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject SwapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.Swap",
    .tp_basicsize = sizeof(Swap),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Swap(mailboxes, plans, fallback, decode, pause_ns, yield_ns): ShmTransport.exchange's memo "
              "and small-array path in C (native/swap.c); everything else goes to `fallback`.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Swap_init,
    .tp_dealloc = (destructor)Swap_dealloc,
    .tp_traverse = (traverseproc)Swap_traverse,
    .tp_clear = (inquiry)Swap_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Swap, vectorcall),
};

int add_swap_type(PyObject *module) {
    if (!(str_dtype = PyUnicode_InternFromString("dtype")) || !(str_shape = PyUnicode_InternFromString("shape")))
        return -1;
    if (PyType_Ready(&SwapType) < 0) return -1;
    Py_INCREF(&SwapType);
    if (PyModule_AddObject(module, "Swap", (PyObject *)&SwapType) < 0) {
        Py_DECREF(&SwapType);
        return -1;
    }
    return 0;
}
