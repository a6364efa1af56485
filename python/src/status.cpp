#include "status.hpp"

#include <nanobind/stl/string.h>

#include <flashcl.h>

namespace nb = nanobind;

namespace flashcl_py {

void check(int status, const std::string &message) {
    if (status != FLASHCL_SUCCESS) throw StatusError(status, message.empty() ? flashcl_status_string(status) : message);
}

// The exception classes live in Python (flashcl/errors.py) so that they can be
// documented, subclassed and caught without importing the extension; the
// translator asks that module for an instance.
void register_status_translator() {
    nb::register_exception_translator([](const std::exception_ptr &p, void *) {
        try {
            std::rethrow_exception(p);
        } catch (const StatusError &e) {
            nb::object errors = nb::module_::import_("flashcl.errors");
            nb::object exc = errors.attr("_from_status")(e.status, flashcl_status_name(e.status), e.message);
            PyErr_SetObject((PyObject *)Py_TYPE(exc.ptr()), exc.ptr());
        }
    });
}

} // namespace flashcl_py
