// depengine's version, for code that must tell releases apart at compile time. The one place it is written: the
// top-level CMakeLists.txt reads it from here (project(VERSION)), so the CMake package, the pkg-config file and these
// macros always agree.
#pragma once

// The major version.
#define DEPENGINE_VERSION_MAJOR 0
// The minor version: before 1.0, it moves on every change that breaks the API or ABI.
#define DEPENGINE_VERSION_MINOR 5
// The patch version.
#define DEPENGINE_VERSION_PATCH 2
// One number that orders versions: 10000 * major + 100 * minor + patch (0.4.0 is 400).
#define DEPENGINE_VERSION (DEPENGINE_VERSION_MAJOR * 10000 + DEPENGINE_VERSION_MINOR * 100 + DEPENGINE_VERSION_PATCH)
// The version as text, "major.minor.patch".
#define DEPENGINE_VERSION_STRING "0.5.2"
