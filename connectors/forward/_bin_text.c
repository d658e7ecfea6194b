/* PackedForward entries with msgpack bin names and text, copied with every bin header of the records made str.
 *
 * See bin_text.py for why. The walk reads each token's header once and never
 * reads past the end of the copy: every header and length is checked against
 * it before it is read, and a payload that runs past it is refused. It runs
 * without the interpreter lock (the copy is its own until returned).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static uint32_t
be16(const unsigned char *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t
be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static const char TRUNCATED[] = "not msgpack entries: they end inside a value";

/* The size of the scalar token whose first byte is h (a number, nil, false or true), 0 if it is no such token. */
static Py_ssize_t
scalar_size(unsigned char h)
{
    if (h <= 0x7f || h >= 0xe0 || h == 0xc0 || h == 0xc2 || h == 0xc3)
        return 1;
    switch (h) {
    case 0xcc: case 0xd0: return 2;
    case 0xcd: case 0xd1: return 3;
    case 0xca: case 0xce: case 0xd2: return 5;
    case 0xcb: case 0xcf: case 0xd3: return 9;
    default: return 0;
    }
}

/* Step over the entry's time at b[*at]: a number or an EventTime (fixext8, or ext8 as some senders pack it). */
static const char *
step_time(const unsigned char *b, Py_ssize_t n, Py_ssize_t *at)
{
    Py_ssize_t i = *at;
    unsigned char h = b[i];
    Py_ssize_t size = (h == 0xc0 || h == 0xc2 || h == 0xc3) ? 0 : scalar_size(h);
    if (h == 0xd7)
        size = 10;
    else if (h == 0xc7) {
        if (n - i < 2)
            return TRUNCATED;
        size = 3 + (Py_ssize_t)b[i + 1];
    }
    if (size == 0)
        return "an entry's time is neither a number nor an EventTime";
    if (size > n - i)
        return TRUNCATED;
    *at = i + size;
    return NULL;
}

/* Step over the name or value at b[*at], turning a bin header into its str twin (bin8/16/32 to str8/16/32). */
static const char *
step_field(unsigned char *b, Py_ssize_t n, Py_ssize_t *at)
{
    Py_ssize_t i = *at, size;
    unsigned char h = b[i];
    if (h >= 0xa0 && h <= 0xbf)
        size = 1 + (h & 0x1f);
    else if (h == 0xc4 || h == 0xd9) {
        if (n - i < 2)
            return TRUNCATED;
        b[i] = 0xd9;
        size = 2 + (Py_ssize_t)b[i + 1];
    }
    else if (h == 0xc5 || h == 0xda) {
        if (n - i < 3)
            return TRUNCATED;
        b[i] = 0xda;
        size = 3 + (Py_ssize_t)be16(b + i + 1);
    }
    else if (h == 0xc6 || h == 0xdb) {
        if (n - i < 5)
            return TRUNCATED;
        b[i] = 0xdb;
        size = 5 + (Py_ssize_t)be32(b + i + 1);
    }
    else if ((size = scalar_size(h)) == 0)
        return "a record holds a value that is not a scalar, str or bin";
    if (size > n - i)
        return TRUNCATED;
    *at = i + size;
    return NULL;
}

/* Walk the entries in b[0:n] (an array header, then [time, record] entries), rewriting as it goes;
 * NULL, or why they are not entries of flat records. */
static const char *
walk(unsigned char *b, Py_ssize_t n)
{
    Py_ssize_t i = 1;
    uint32_t count;
    if (n < 1)
        return "not msgpack entries: nothing to read";
    if ((b[0] & 0xf0) == 0x90)
        count = b[0] & 0x0f;
    else if (b[0] == 0xdc || b[0] == 0xdd) {
        i = b[0] == 0xdc ? 3 : 5;
        if (n < i)
            return TRUNCATED;
        count = b[0] == 0xdc ? be16(b + 1) : be32(b + 1);
    }
    else
        return "not msgpack entries: they are not an array";
    for (uint32_t k = 0; k < count; k++) {
        const char *why;
        if (i >= n)
            return TRUNCATED;
        if (b[i] != 0x92)
            return "an entry is not a [time, record] array";
        if (++i >= n)
            return TRUNCATED;
        if ((why = step_time(b, n, &i)) != NULL)
            return why;
        if (i >= n)
            return TRUNCATED;
        if ((b[i] & 0xf0) != 0x80)
            return "a record is not a map of at most 15 fields";
        for (int tokens = (b[i++] & 0x0f) * 2; tokens > 0; tokens--) {  /* a name and a value per field */
            if (i >= n)
                return TRUNCATED;
            if ((why = step_field(b, n, &i)) != NULL)
                return why;
        }
    }
    if (i != n)
        return "not msgpack entries: bytes follow the last entry";
    return NULL;
}

static PyObject *
as_str(PyObject *Py_UNUSED(module), PyObject *entries)
{
    Py_buffer view;
    if (PyObject_GetBuffer(entries, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *copy = PyBytes_FromStringAndSize(NULL, view.len);
    if (copy == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *b = (unsigned char *)PyBytes_AS_STRING(copy);
    const char *why;
    Py_BEGIN_ALLOW_THREADS
    memcpy(b, view.buf, (size_t)view.len);
    why = walk(b, view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (why != NULL) {
        Py_DECREF(copy);
        PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    return copy;
}

static PyMethodDef methods[] = {
    {"as_str", as_str, METH_O,
     "as_str(entries, /)\n--\n\n"
     "A copy of ``entries`` (an array header, then PackedForward ``[time, record]`` entries) with every bin\n"
     "header of the records' names and values turned into its str twin; ValueError naming why if they are\n"
     "not entries of flat records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_bin_text",
    .m_doc = "PackedForward entries' bin read as str (see bin_text).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__bin_text(void)
{
    return PyModuleDef_Init(&module);
}
