/*
 * read_peer: one copy of another process's memory into ours (Linux cross-memory attach,
 * process_vm_readv), the way MPICH's shared-memory path (UCX's cma transport) moves a large message
 * between two ranks: the receiver reads the sender's array where it lies, so the bytes cross once,
 * where a ring message crosses twice (into the ring, then out of it). comm/shm_lend.py uses it.
 *
 * The kernel lets a process read another one it could ptrace (same user, no Yama restriction, the
 * syscall allowed by seccomp); `probe_peer_reads` asks once, reading the parent's memory at an
 * address no process maps: EFAULT means the read itself is allowed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

PyDoc_STRVAR(read_peer_doc,
"read_peer(pid, address, out) -> None\n\n"
"Copy len(out) bytes at `address` in process `pid` into the writable C-contiguous buffer `out`\n"
"(process_vm_readv, GIL released); OSError with the errno when the kernel refuses or the process\n"
"is gone (ESRCH).");

static PyObject *read_peer(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "read_peer(pid, address, out)");
        return NULL;
    }
    long pid = PyLong_AsLong(args[0]);
    unsigned long long address = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(args[2], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    char *dst = out.buf;
    size_t left = (size_t)out.len;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    while (left > 0) { /* the kernel may copy less than asked (a page boundary, a signal) */
        struct iovec local = {dst, left}, remote = {(void *)(uintptr_t)address, left};
        ssize_t got = process_vm_readv((pid_t)pid, &local, 1, &remote, 1, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            err = errno;
            break;
        }
        if (got == 0) {
            err = EFAULT;
            break;
        }
        dst += got;
        address += (unsigned long long)got;
        left -= (size_t)got;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(probe_peer_reads_doc,
"probe_peer_reads() -> bool\n\n"
"May this process read another one's memory with read_peer? Asked of the parent process at an\n"
"address nothing maps: the kernel checks the permission before the address (EFAULT: allowed).");

static PyObject *probe_peer_reads(PyObject *module, PyObject *unused) {
    char byte;
    struct iovec local = {&byte, 1}, remote = {(void *)(uintptr_t)8, 1};
    ssize_t got = process_vm_readv(getppid(), &local, 1, &remote, 1, 0);
    return PyBool_FromLong(got == 1 || (got < 0 && errno == EFAULT));
}

PyDoc_STRVAR(address_of_doc,
"address_of(x) -> int\n\n"
"Where the C-contiguous buffer `x` starts in this process's memory (what a peer's read_peer reads):\n"
"a tenth of what numpy's __array_interface__ costs.");

static PyObject *address_of(PyObject *module, PyObject *x) {
    Py_buffer view;
    if (PyObject_GetBuffer(x, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *result = PyLong_FromVoidPtr(view.buf);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef cma_functions[] = {
    {"address_of", address_of, METH_O, address_of_doc},
    {"read_peer", (PyCFunction)(void (*)(void))read_peer, METH_FASTCALL, read_peer_doc},
    {"probe_peer_reads", probe_peer_reads, METH_NOARGS, probe_peer_reads_doc},
    {NULL, NULL, 0, NULL},
};

int add_cma_functions(PyObject *module) { return PyModule_AddFunctions(module, cma_functions); }
