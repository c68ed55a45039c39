/*
 * _playground_native.Mailboxes, the Python type over the shared-memory mailboxes of mailbox.c (which
 * says how they work): its constructor, try_send, receive, land, exchange, stream (stream.c), close,
 * and the module's copy_payload. The mailboxes themselves know nothing of this file.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "mailbox.h"

static int Mailboxes_init(Mailboxes *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"directory", "rank", "size", "slots", "slot_bytes", NULL};
    const char *dir;
    int rank, size;
    unsigned int slots = 16, slot_bytes = 8192;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sii|II", kwlist, &dir, &rank, &size, &slots, &slot_bytes))
        return -1;
    if (size < 1 || rank < 0 || rank >= size) {
        PyErr_Format(PyExc_ValueError, "rank %d of %d ranks", rank, size);
        return -1;
    }
    if (slots < 1 || slot_bytes < 64 || slot_bytes % 64) {
        PyErr_Format(PyExc_ValueError, "slots must be >= 1 and slot_bytes a multiple of 64 >= 64, got %u, %u",
                     slots, slot_bytes);
        return -1;
    }
    if (self->own) {
        PyErr_SetString(PyExc_RuntimeError, "Mailboxes already initialised");
        return -1;
    }
    return mbox_create(self, dir, rank, size, slots, slot_bytes);
}

static void Mailboxes_dealloc(Mailboxes *self) {
    if (!self->busy) mbox_unmap_all(self);
    PyMem_Free(self->dir);
    PyMem_Free(self->peer);
    PyMem_Free(self->expected);
    PyMem_Free(self->next);
    PyMem_Free(self->warm);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_open(Mailboxes *self) {
    if (!self->own) {
        PyErr_SetString(PyExc_ValueError, "the mailboxes are closed");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(try_send_doc,
"try_send(dst, head, body=None) -> bool\n\n"
"Post one message, the bytes of `head` followed by those of `body` (any contiguous buffer), to\n"
"rank `dst`'s mailbox from this rank. False, with nothing sent, if the mailbox is full (the\n"
"receiver will ring this rank's bell when it frees a slot) or `dst` has not created its file.\n"
"ValueError if the message is larger than a slot holds (`max_bytes`).");

static PyObject *Mailboxes_try_send(Mailboxes *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "try_send(dst, head, body=None)");
        return NULL;
    }
    if (check_open(self) < 0) return NULL;
    long dst = PyLong_AsLong(args[0]);
    if (dst == -1 && PyErr_Occurred()) return NULL;
    if (dst < 0 || dst >= self->size) {
        PyErr_Format(PyExc_ValueError, "rank %d cannot post to rank %ld", self->rank, dst);
        return NULL;
    }
    Py_buffer head, body = {0};
    if (PyObject_GetBuffer(args[1], &head, PyBUF_SIMPLE) < 0) return NULL;
    int has_body = nargs == 3 && args[2] != Py_None;
    if (has_body && PyObject_GetBuffer(args[2], &body, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&head);
        return NULL;
    }
    int posted = mbox_post(self, (int)dst, head.buf, (size_t)head.len, body.buf, (size_t)body.len);
    PyObject *result = posted < 0 ? NULL : Py_NewRef(posted ? Py_True : Py_False);
    PyBuffer_Release(&head);
    if (has_body) PyBuffer_Release(&body);
    return result;
}

PyDoc_STRVAR(receive_doc,
"receive(timeout_ms, pause_ns=0, yield_ns=0) -> bytes | None\n\n"
"The next message from any sender (each sender's in the order it posted them), waiting up to\n"
"`timeout_ms` (0: only what has arrived) with the GIL released: polling the bell with the pause\n"
"instruction for `pause_ns` (yielding instead if another rank last waited on this CPU), then\n"
"yielding the core between polls until `yield_ns` from the start, then asleep. None at the deadline,\n"
"or earlier when a receiver freed room this rank waits for.");

static PyObject *Mailboxes_receive(Mailboxes *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "receive(timeout_ms, pause_ns=0, yield_ns=0)");
        return NULL;
    }
    if (check_open(self) < 0) return NULL;
    double timeout_ms = PyFloat_AsDouble(args[0]);
    double pause_ns = nargs > 1 ? PyFloat_AsDouble(args[1]) : 0.0;
    double yield_ns = nargs > 2 ? PyFloat_AsDouble(args[2]) : 0.0;
    if (PyErr_Occurred()) return NULL;
    return mbox_receive(self, timeout_ms, pause_ns, yield_ns);
}


PyDoc_STRVAR(land_doc,
"land(timeout_ms, pause_ns, yield_ns, src, head, target, code, base) -> True | bytes | None\n\n"
"Wait for the next message as `receive` does. If it is from `src` and is `head` followed by exactly\n"
"len(target) bytes, land it in `target` (writable, C-contiguous) without a Python object in between:\n"
"target = op(base, message) element-wise (base: None for target itself, else a buffer of the same\n"
"length), with op and element type from `code` (reduce.c; op 0 copies), free its slot and return\n"
"True. Any other message is returned as `receive` returns it; None at the deadline or on room.");

static PyObject *Mailboxes_land(Mailboxes *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "land(timeout_ms, pause_ns, yield_ns, src, head, target, code, base)");
        return NULL;
    }
    if (check_open(self) < 0) return NULL;
    double timeout_ms = PyFloat_AsDouble(args[0]);
    double pause_ns = PyFloat_AsDouble(args[1]);
    double yield_ns = PyFloat_AsDouble(args[2]);
    long src = PyLong_AsLong(args[3]);
    long code = PyLong_AsLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer head, target, base = {0};
    if (PyObject_GetBuffer(args[4], &head, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[5], &target, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&head);
        return NULL;
    }
    int has_base = args[7] != Py_None;
    PyObject *result = NULL;
    if (has_base && PyObject_GetBuffer(args[7], &base, PyBUF_C_CONTIGUOUS) < 0) {
        has_base = 0;
    } else if (has_base && base.len != target.len) {
        PyErr_Format(PyExc_ValueError, "land: a base of %zd bytes for a target of %zd", base.len, target.len);
    } else {
        result = mbox_land_into(self, timeout_ms, pause_ns, yield_ns, src, &head, &target, (int)code,
                           has_base ? base.buf : NULL);
    }
    PyBuffer_Release(&head);
    PyBuffer_Release(&target);
    if (has_base) PyBuffer_Release(&base);
    return result;
}

PyDoc_STRVAR(exchange_doc,
"exchange(dst, head_out, x, timeout_ms, pause_ns, yield_ns, src, head_in, target, code)\n"
"    -> None | False | True | bytes\n\n"
"`try_send(dst, head_out, x)`, then, if that posted, `land(timeout_ms, pause_ns, yield_ns, src,\n"
"head_in, target, code, None)`, in one call: the step of a small exchange (send a buffer to one\n"
"peer, reduce what another sends into `target`, which may be `x` itself: x is copied out first).\n"
"None: nothing was posted (no room); otherwise it was, and False, True or bytes say what the landing\n"
"found (False where `land` says None). The headers are bytes.");

static PyObject *Mailboxes_exchange(Mailboxes *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "exchange(dst, head_out, x, timeout_ms, pause_ns, yield_ns, src, head_in, target, code)");
        return NULL;
    }
    if (check_open(self) < 0) return NULL;
    long dst = PyLong_AsLong(args[0]);
    double timeout_ms = PyFloat_AsDouble(args[3]);
    double pause_ns = PyFloat_AsDouble(args[4]);
    double yield_ns = PyFloat_AsDouble(args[5]);
    long src = PyLong_AsLong(args[6]);
    long code = PyLong_AsLong(args[9]);
    if (PyErr_Occurred()) return NULL;
    if (dst < 0 || dst >= self->size || src < 0 || src >= self->size) {
        PyErr_Format(PyExc_ValueError, "rank %d cannot exchange with ranks %ld and %ld", self->rank, dst, src);
        return NULL;
    }
    if (!PyBytes_CheckExact(args[1]) || !PyBytes_CheckExact(args[7])) {
        PyErr_SetString(PyExc_TypeError, "exchange: the headers are bytes");
        return NULL;
    }
    /* The headers are bytes: their memory is read in place. `x` is usually `target` (a buffer sent,
     * then reduced into): then one buffer is taken, writable. */
    Py_buffer head_in = {.buf = PyBytes_AS_STRING(args[7]), .len = PyBytes_GET_SIZE(args[7])};
    Py_buffer x, target;
    int same = args[2] == args[8];
    if (PyObject_GetBuffer(args[8], &target, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (!same && PyObject_GetBuffer(args[2], &x, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&target);
        return NULL;
    }
    const Py_buffer *sent = same ? &target : &x;
    PyObject *result = NULL;
    int posted = mbox_post(self, (int)dst, PyBytes_AS_STRING(args[1]), (size_t)PyBytes_GET_SIZE(args[1]), sent->buf,
                      (size_t)sent->len);
    if (posted == 0) {
        result = Py_NewRef(Py_None);
    } else if (posted > 0) {
        result = mbox_land_into(self, timeout_ms, pause_ns, yield_ns, src, &head_in, &target, (int)code, NULL);
        if (result == Py_None) {
            Py_DECREF(result);
            result = Py_NewRef(Py_False);
        }
    }
    if (!same) PyBuffer_Release(&x);
    PyBuffer_Release(&target);
    return result;
}

static PyObject *Mailboxes_close(Mailboxes *self, PyObject *unused) {
    if (!self->busy) mbox_unmap_all(self);
    Py_RETURN_NONE;
}

static PyObject *Mailboxes_get_max_bytes(Mailboxes *self, void *closure) {
    return PyLong_FromUnsignedLong(self->slot_bytes - SLOT_HEADER_BYTES);
}

static PyObject *Mailboxes_get_stats(Mailboxes *self, void *closure) {
    return Py_BuildValue("{sKsKsKsKsK}", "waits", (unsigned long long)self->waits, "shared_core",
                         (unsigned long long)self->shared_core, "found_pausing",
                         (unsigned long long)self->found_pausing, "found_yielding",
                         (unsigned long long)self->found_yielding, "slept", (unsigned long long)self->slept);
}

static PyObject *Mailboxes_get_closed(Mailboxes *self, void *closure) { return PyBool_FromLong(!self->own); }

static PyMethodDef Mailboxes_methods[] = {
    {"try_send", (PyCFunction)(void (*)(void))Mailboxes_try_send, METH_FASTCALL, try_send_doc},
    {"receive", (PyCFunction)(void (*)(void))Mailboxes_receive, METH_FASTCALL, receive_doc},
    {"land", (PyCFunction)(void (*)(void))Mailboxes_land, METH_FASTCALL, land_doc},
    {"exchange", (PyCFunction)(void (*)(void))Mailboxes_exchange, METH_FASTCALL, exchange_doc},
    {"stream", (PyCFunction)(void (*)(void))Mailboxes_stream, METH_FASTCALL, Mailboxes_stream_doc},
    {"close", (PyCFunction)Mailboxes_close, METH_NOARGS, "Unmap every file and remove this rank's."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Mailboxes_getset[] = {
    {"max_bytes", (getter)Mailboxes_get_max_bytes, NULL, "the largest message a slot holds", NULL},
    {"closed", (getter)Mailboxes_get_closed, NULL, "True after close()", NULL},
    {"stats", (getter)Mailboxes_get_stats, NULL,
     "what this rank's waits did: {waits, shared_core (another rank waited on its CPU), found_pausing, "
     "found_yielding, slept (times it went to sleep)}",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(Mailboxes_doc,
"Mailboxes(directory, rank, size, slots=16, slot_bytes=8192)\n\n"
"This rank's shared-memory mailboxes: creates `directory`/mbox-<rank> (its bell and one mailbox\n"
"of `slots` slots per sender) and maps each peer's file on the first post to it. Create every\n"
"rank's before any rank posts (a post to a rank without a file returns False).");

static PyTypeObject MailboxesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_playground_native.Mailboxes",
    .tp_basicsize = sizeof(Mailboxes),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Mailboxes_doc,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Mailboxes_init,
    .tp_dealloc = (destructor)Mailboxes_dealloc,
    .tp_methods = Mailboxes_methods,
    .tp_getset = Mailboxes_getset,
};

PyDoc_STRVAR(copy_payload_doc,
"copy_payload(out, record, offset) -> None\n\n"
"Copy record[offset:] into the writable C-contiguous buffer `out`, which must hold exactly that\n"
"many bytes (ValueError otherwise): a received small array lands in the caller's array in one\n"
"call, without a numpy view of the record in between.");

static PyObject *copy_payload(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "copy_payload(out, record, offset)");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[2]);
    if (offset == -1 && PyErr_Occurred()) return NULL;
    Py_buffer out, rec;
    if (PyObject_GetBuffer(args[0], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &rec, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&out);
        return NULL;
    }
    PyObject *result = NULL;
    if (offset < 0 || offset > rec.len || rec.len - offset != out.len) {
        PyErr_Format(PyExc_ValueError, "copy_payload: %zd bytes after offset %zd do not fill %zd bytes",
                     rec.len - offset, offset, out.len);
    } else {
        memcpy(out.buf, (char *)rec.buf + offset, out.len);
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&rec);
    return result;
}

static PyMethodDef module_functions[] = {
    {"copy_payload", (PyCFunction)(void (*)(void))copy_payload, METH_FASTCALL, copy_payload_doc},
    {NULL, NULL, 0, NULL},
};

PyTypeObject *mbox_type(void) { return &MailboxesType; }

int add_mailbox_type(PyObject *module) {
    if (PyModule_AddFunctions(module, module_functions) < 0) return -1;
    if (PyType_Ready(&MailboxesType) < 0) return -1;
    Py_INCREF(&MailboxesType);
    if (PyModule_AddObject(module, "Mailboxes", (PyObject *)&MailboxesType) < 0) {
        Py_DECREF(&MailboxesType);
        return -1;
    }
    return 0;
}
