# Build helpers shared by every folder. Included by the top-level CMakeLists.txt (and by scratch drivers that build
# one folder alone).
set(DEPENGINE_SOURCE_DIR ${CMAKE_CURRENT_LIST_DIR}/..)
cmake_path(NORMAL_PATH DEPENGINE_SOURCE_DIR)
# Headers of the libraries are included through the project's name, #include <depengine/engine/engine.h>, by users and
# by the libraries themselves, so that a user's own engine/errors.h can never stand in for ours. Installed, the headers
# sit under include/depengine and only include/ is exported; in the build tree, a folder holding one link, depengine ->
# the source root, plays include/. (Tests, benchmarks and examples also include their own helpers by their path from
# the repository root, "test/...": the source root is on their include path only.)
set(DEPENGINE_INCLUDE_ROOT ${CMAKE_BINARY_DIR}/depengine_include)
file(MAKE_DIRECTORY ${DEPENGINE_INCLUDE_ROOT})
file(CREATE_LINK ${DEPENGINE_SOURCE_DIR} ${DEPENGINE_INCLUDE_ROOT}/depengine SYMBOLIC)

# Warnings for our own targets only (never leaked to users through the installed targets). Designated initializers
# of option structs ({.name = "x"}) leave the other fields at their defaults on purpose, which GCC 12's
# -Wmissing-field-initializers would flag.
add_library(depengine_warnings INTERFACE)
target_compile_options(depengine_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
                                                    -Wno-missing-field-initializers
                                                    $<$<BOOL:${DEPENGINE_WERROR}>:-Werror>)

# depengine_library(NAME <short> [SOURCES ...] [DEPS ...]) builds depengine_<short>, aliased depengine::<short>,
# and marks it for installation. Without SOURCES it is a header-only (INTERFACE) library.
function(depengine_library)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPS" ${ARGN})
  set(target depengine_${ARG_NAME})
  if(ARG_SOURCES)
    add_library(${target} ${ARG_SOURCES})
    # Shared builds (BUILD_SHARED_LIBS): libdepengine_<short>.so.<version>, with SONAME .so.<major>.<minor> (before
    # 1.0 a minor release may break the ABI), and RUNPATH $ORIGIN, so that installed libraries find each other.
    set_target_properties(${target} PROPERTIES EXPORT_NAME ${ARG_NAME} OUTPUT_NAME depengine_${ARG_NAME}
                                               VERSION ${PROJECT_VERSION}
                                               SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
                                               INSTALL_RPATH "$ORIGIN")
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${DEPENGINE_INCLUDE_ROOT}>
                                                $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${target} PUBLIC ${ARG_DEPS} PRIVATE $<BUILD_INTERFACE:depengine_warnings>)
  else()
    add_library(${target} INTERFACE)
    set_target_properties(${target} PROPERTIES EXPORT_NAME ${ARG_NAME})
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${DEPENGINE_INCLUDE_ROOT}>
                                                   $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${target} INTERFACE ${ARG_DEPS})
  endif()
  add_library(depengine::${ARG_NAME} ALIAS ${target})
  set_property(GLOBAL APPEND PROPERTY DEPENGINE_INSTALL_TARGETS ${target})
endfunction()

# depengine_test(NAME <name> SOURCES ... LIBS ... [MPI]): one Catch2 executable, registered with CTest under <name>.
# It is linked with the shared main in test/main.cpp; with MPI, with the MPI main (test/mpi_main.cpp) instead, and run
# by depengine_mpirun_test (below) on 2 ranks (<name>_np2) and on 4 oversubscribed ranks (<name>_np4). Randomized tests
# read DEPENGINE_TEST_REPEAT (how many seeds to run) from the environment; DEPENGINE_SANITIZER is passed to them as a
# definition so they can scale their work.
function(depengine_test)
  cmake_parse_arguments(ARG "MPI" "NAME" "SOURCES;LIBS" ${ARGN})
  set(main depengine_test_main)
  set(main_source main.cpp)
  set(main_libs Catch2::Catch2)
  if(ARG_MPI)
    set(main depengine_test_mpi_main)
    set(main_source mpi_main.cpp)
    set(main_libs Catch2::Catch2 MPI::MPI_CXX)
  endif()
  if(NOT TARGET ${main})
    find_package(Catch2 REQUIRED)
    add_library(${main} STATIC ${DEPENGINE_SOURCE_DIR}/test/${main_source})
    target_include_directories(${main} PRIVATE ${DEPENGINE_SOURCE_DIR})
    target_link_libraries(${main} PUBLIC ${main_libs})
  endif()
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE ${main} ${ARG_LIBS} depengine_warnings)
  target_include_directories(${ARG_NAME} PRIVATE ${DEPENGINE_SOURCE_DIR} ${DEPENGINE_INCLUDE_ROOT})
  target_compile_definitions(${ARG_NAME} PRIVATE DEPENGINE_SANITIZER="${DEPENGINE_SANITIZER}")
  if(NOT ARG_MPI)
    add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
    return()
  endif()
  foreach(ranks 2 4)
    depengine_mpirun_test(NAME ${ARG_NAME}_np${ranks} RANKS ${ranks} COMMAND $<TARGET_FILE:${ARG_NAME}>)
  endforeach()
endfunction()

# depengine_mpirun_test(NAME <name> RANKS <n> COMMAND <program> [args...]): a CTest test that runs the program under
# mpirun on <n> ranks of this machine (oversubscribed if the cores are fewer), over loopback. Open MPI refuses to run
# as root unless told to: the test tells it (CI runs as root). Not registered under ThreadSanitizer: Open MPI is not
# instrumented, and TSAN takes its own locking (a recursive mutex of its shared-memory transport) for errors. Under
# AddressSanitizer and UBSan it runs without LeakSanitizer: Open MPI keeps what MPI_Init allocates past MPI_Finalize,
# in plugins it has unloaded by then, so no stack could tell its leaks from ours.
function(depengine_mpirun_test)
  cmake_parse_arguments(ARG "" "NAME;RANKS" "COMMAND" ${ARGN})
  if(DEPENGINE_SANITIZER STREQUAL "thread")
    return()
  endif()
  add_test(NAME ${ARG_NAME} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ARG_RANKS} --oversubscribe
                                    ${MPIEXEC_PREFLAGS} ${ARG_COMMAND})
  set(environment "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  if(DEPENGINE_SANITIZER STREQUAL "address")
    list(APPEND environment "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES ENVIRONMENT "${environment}" TIMEOUT 300)
endfunction()

# depengine_bench(NAME <name> SOURCES ... LIBS ...): one benchmark executable using bench/common/report.h.
function(depengine_bench)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;LIBS" ${ARGN})
  if(NOT TARGET depengine_bench_report)
    add_library(depengine_bench_report STATIC ${DEPENGINE_SOURCE_DIR}/bench/common/report.cpp)
    target_include_directories(depengine_bench_report PUBLIC ${DEPENGINE_SOURCE_DIR})
    target_link_libraries(depengine_bench_report PRIVATE depengine_warnings)
  endif()
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE depengine_bench_report ${ARG_LIBS} depengine_warnings)
  target_include_directories(${ARG_NAME} PRIVATE ${DEPENGINE_SOURCE_DIR} ${DEPENGINE_INCLUDE_ROOT})
  depengine_help_test(${ARG_NAME} ${ARG_NAME})
endfunction()

# Every example and benchmark answers --help with its usage (bench/common/report.h, examples/common/arguments.h).
function(depengine_help_test name command)
  add_test(NAME ${name}_help COMMAND ${command} --help)
  set_tests_properties(${name}_help PROPERTIES PASS_REGULAR_EXPRESSION "^usage: ${name} ")
endfunction()
