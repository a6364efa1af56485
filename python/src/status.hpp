// Failures cross into Python in two ways: argument errors the binding finds
// itself raise ValueError (nb::value_error) before anything runs; a status
// from FlashCL or OpenCL raises StatusError, which the module turns into
// flashcl.Error (or flashcl.InvalidArgumentError, also a ValueError, for the
// library's -10000s "invalid argument" group) carrying the status name and
// the library's message, which names the field.
#pragma once

#include <exception>
#include <string>

#include <nanobind/nanobind.h>

namespace flashcl_py {

struct StatusError : std::exception {
    StatusError(int status, std::string message) : status(status), message(std::move(message)) {}
    const char *what() const noexcept override { return message.c_str(); }
    int status;
    std::string message;
};

// Throws StatusError when status is not FLASHCL_SUCCESS; the message says what failed.
void check(int status, const std::string &message);

void register_status_translator();

} // namespace flashcl_py
