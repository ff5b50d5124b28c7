/* Force-included (build_shim.py: -include) into every shim source, so also into the cffi
 * module code that includes Python.h. The shim is linked WITHOUT libpython: loading and
 * relocating libpython cost every preloaded C process 1.5-3 ms (1-2% of a launch-heavy
 * app's wall time) although plain observe mode never runs Python. libpython is dlopen'ed
 * (RTLD_GLOBAL) by clproj_python_load() before the first Python callback, and the
 * module's calls into Python bind lazily through the PLT. Data references cannot bind
 * lazily, so the only two the cffi embedding code makes go through functions that look
 * the objects up once libpython is there (track.c). tests/test_observe_sampling.py checks
 * that the built library needs no libpython and has no other reference into it. */
#ifndef CLPROJ_LAZY_PYTHON_H
#define CLPROJ_LAZY_PYTHON_H
#define PyCapsule_Type (*clproj_py_capsule_type())
#define _Py_NoneStruct (*clproj_py_none_struct())
/* Weak, so that LD_BIND_NOW=1 cannot make the shim fail to load in a C app (the calls are
 * then refused by clproj_python_load instead). The functions the cffi embedding code calls;
 * tests/test_observe_sampling.py fails when one is missing here. */
#pragma weak PyArg_UnpackTuple
#pragma weak PyDict_GetItemString
#pragma weak PyDict_New
#pragma weak PyDict_SetItemString
#pragma weak PyErr_Display
#pragma weak PyErr_Fetch
#pragma weak PyErr_NormalizeException
#pragma weak PyErr_Occurred
#pragma weak PyEval_EvalCode
#pragma weak PyEval_GetBuiltins
#pragma weak PyEval_RestoreThread
#pragma weak PyEval_SaveThread
#pragma weak PyFile_WriteObject
#pragma weak PyFile_WriteString
#pragma weak PyGILState_Ensure
#pragma weak PyGILState_Release
#pragma weak PyImport_GetModuleDict
#pragma weak PyImport_ImportModule
#pragma weak PyLong_FromLong
#pragma weak PyLong_FromUnsignedLong
#pragma weak PyLong_FromVoidPtr
#pragma weak PyObject_CallMethod
#pragma weak PyObject_Free
#pragma weak PyObject_GetAttrString
#pragma weak PyObject_Malloc
#pragma weak PySys_GetObject
#pragma weak Py_CompileStringExFlags
#pragma weak Py_InitializeEx
#pragma weak Py_IsInitialized
#pragma weak _Py_Dealloc
#endif
