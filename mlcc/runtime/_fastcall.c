/* mlcc.runtime._fastcall: the optional helper behind CompiledModel.prepare() and run().
 *
 * A Call holds a generated NAME_run_v and its three arguments (context, input and output
 * pointer arrays) as raw addresses, and `Call.run()` calls it: no argument is converted, so
 * the call costs what CPython's call of a builtin costs (~20 ns, against ~230 ns for a cffi
 * ABI-mode call; docs/python-api.md, "prepare() and the cost of a call"). Built by
 * `pip install` when a C compiler and the Python headers are there (setup.py, optional);
 * loader.py falls back to cffi without it.
 *
 * The addresses must stay valid while the Call lives: `keep` holds their owners (the model,
 * its input copies and outputs). release_gil (default true) releases the GIL around the C
 * call, as cffi does; loader.py turns it off for calls of a few microseconds, where it costs
 * ~30 ns per call and other threads wait no longer than for any bytecode. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>

typedef int (*mlcc_run_v)(const void *ctx, const void *const *inputs, void *const *outputs);

typedef struct {
    PyObject_HEAD
    mlcc_run_v run;
    const void *ctx;
    const void *const *inputs;
    void *const *outputs;
    char release_gil;
    PyObject *keep;
} Call;

static PyObject *call_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"run", "ctx", "inputs", "outputs", "keep", "release_gil", NULL};
    PyObject *run, *ctx, *inputs, *outputs, *keep = Py_None;
    int release_gil = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!O!|Op:Call", kwlist, &PyLong_Type,
                                     &run, &PyLong_Type, &ctx, &PyLong_Type, &inputs,
                                     &PyLong_Type, &outputs, &keep, &release_gil))
        return NULL;
    Call *self = (Call *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->run = (mlcc_run_v)PyLong_AsVoidPtr(run);
    self->ctx = PyLong_AsVoidPtr(ctx);
    self->inputs = (const void *const *)PyLong_AsVoidPtr(inputs);
    self->outputs = (void *const *)PyLong_AsVoidPtr(outputs);
    self->release_gil = (char)release_gil;
    Py_INCREF(keep);
    self->keep = keep;
    if (PyErr_Occurred() || self->run == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "run must not be NULL");
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int call_traverse(Call *self, visitproc visit, void *arg) {
    Py_VISIT(self->keep);
    return 0;
}

static int call_clear(Call *self) {
    Py_CLEAR(self->keep);
    return 0;
}

static void call_dealloc(Call *self) {
    PyObject_GC_UnTrack(self);
    call_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* METH_FASTCALL rather than METH_NOARGS or tp_call/vectorcall: CPython 3.11 specializes calls
 * of FASTCALL builtins (21 ns per call here, against 28-31 ns for the others). */
static PyObject *call_run(Call *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)args;
    if (nargs != 0) {
        PyErr_SetString(PyExc_TypeError, "run() takes no arguments");
        return NULL;
    }
    int status;
    if (self->release_gil) {
        Py_BEGIN_ALLOW_THREADS
        status = self->run(self->ctx, self->inputs, self->outputs);
        Py_END_ALLOW_THREADS
    } else {
        status = self->run(self->ctx, self->inputs, self->outputs);
    }
    return PyLong_FromLong(status);
}

static PyMethodDef call_methods[] = {
    {"run", (PyCFunction)(void (*)(void))call_run, METH_FASTCALL,
     "run() -> int: one call of run_v(ctx, inputs, outputs); its status (0: success)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef call_members[] = {
    {"release_gil", T_BOOL, offsetof(Call, release_gil), 0,
     "whether run() releases the GIL around the C call"},
    {"keep", T_OBJECT, offsetof(Call, keep), READONLY, "the owners of the addresses"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject CallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mlcc.runtime._fastcall.Call",
    .tp_doc = "Call(run, ctx, inputs, outputs, keep=None, release_gil=True): addresses of "
              "a run_v function and its arguments; run() calls it",
    .tp_basicsize = sizeof(Call),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = call_new,
    .tp_dealloc = (destructor)call_dealloc,
    .tp_traverse = (traverseproc)call_traverse,
    .tp_clear = (inquiry)call_clear,
    .tp_methods = call_methods,
    .tp_members = call_members,
};

static struct PyModuleDef fastcall_module = {
    PyModuleDef_HEAD_INIT, .m_name = "mlcc.runtime._fastcall",
    .m_doc = "Calls of a generated run_v with no argument conversion (see loader.py).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__fastcall(void) {
    if (PyType_Ready(&CallType) < 0) return NULL;
    PyObject *module = PyModule_Create(&fastcall_module);
    if (module == NULL) return NULL;
    Py_INCREF(&CallType);
    if (PyModule_AddObject(module, "Call", (PyObject *)&CallType) < 0) {
        Py_DECREF(&CallType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
