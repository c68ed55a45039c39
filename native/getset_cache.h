/*
 * A data attribute read by calling its getter, or loading its object member, directly: ndarray's
 * nbytes, dtype, shape and size, a simulated message's done, an outgoing message's array, a
 * tracer's `messages` (a slot). The descriptor is looked up once per call site and type.
 *
 * Why: PyObject_GetAttr walks the type's method cache, checks the descriptor and dispatches through
 * getset_get (or the instance dict) before the value comes back, and the communicator's C path and
 * the simulated transport make about a dozen such reads per message: ~2,800 of a simulated
 * message's ~20,000 instructions.
 *
 * Correct as CPython's own attribute caches are: a getset or member descriptor is a data
 * descriptor, so no instance dict can shadow it; an immutable type (a static C type such as
 * numpy.ndarray) cannot change, and a mutable one's version tag changes whenever it or a base does,
 * which sends the read back through the lookup. Only types with the generic attribute lookup are
 * cached (no __getattribute__ or __getattr__ of their own), and the cache holds its type, so the
 * address cannot be reused. Any other type at the same call site (a subclass, another transport's
 * object) goes through PyObject_GetAttr as before.
 */
#ifndef PLAYGROUND_GETSET_CACHE_H
#define PLAYGROUND_GETSET_CACHE_H

#include <Python.h>
#include <structmember.h>

typedef struct {
    PyTypeObject *type;   /* the first cacheable type seen here, or NULL */
    unsigned int version; /* its version tag when the entry was made; 0 for an immutable type */
    getter get;           /* the getter for the name, or NULL */
    void *closure;
    Py_ssize_t offset; /* else the offset of its object member, or 0: neither, use PyObject_GetAttr */
} getset_cache;

static inline int getset_current(getset_cache *c, PyTypeObject *t) {
    return t == c->type &&
           (!c->version || (PyType_HasFeature(t, Py_TPFLAGS_VALID_VERSION_TAG) && t->tp_version_tag == c->version));
}

static inline PyObject *getset_read(getset_cache *c, PyObject *obj, PyObject *name) {
    PyTypeObject *t = Py_TYPE(obj);
    if (getset_current(c, t)) {
        if (c->get) return c->get(obj, c->closure);
        PyObject *v = c->offset ? *(PyObject **)((char *)obj + c->offset) : NULL;
        if (v) return Py_NewRef(v); /* (unset: PyObject_GetAttr raises as the member would) */
    } else if ((c->type == NULL || t == c->type) && t->tp_getattro == PyObject_GenericGetAttr) {
        PyObject *d = _PyType_Lookup(t, name); /* borrowed; gives the type a version tag */
        int immutable = PyType_HasFeature(t, Py_TPFLAGS_IMMUTABLETYPE);
        if (immutable || (PyType_HasFeature(t, Py_TPFLAGS_VALID_VERSION_TAG) && t->tp_version_tag)) {
            if (c->type == NULL) c->type = (PyTypeObject *)Py_NewRef(t);
            c->version = immutable ? 0 : t->tp_version_tag;
            c->get = NULL;
            c->offset = 0;
            if (d && Py_IS_TYPE(d, &PyGetSetDescr_Type) && ((PyGetSetDescrObject *)d)->d_getset->get) {
                c->get = ((PyGetSetDescrObject *)d)->d_getset->get;
                c->closure = ((PyGetSetDescrObject *)d)->d_getset->closure;
            } else if (d && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
                PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
                if ((m->type == T_OBJECT || m->type == T_OBJECT_EX) && m->offset > 0) c->offset = m->offset;
            }
            if (c->get || c->offset) return getset_read(c, obj, name);
        }
    }
    return PyObject_GetAttr(obj, name);
}

#endif
