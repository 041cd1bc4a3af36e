# Builds depengine's libraries from SOURCE_DIR as shared libraries (no tests, benchmarks, examples or GPU backends)
# under WORK_DIR, installs them into a scratch prefix, and checks what a user of the shared libraries relies on:
#   1. each library has a versioned SONAME (libdepengine_engine.so.<major>.<minor>) and RUNPATH $ORIGIN, so the
#      installed libraries find one another wherever the prefix is;
#   2. the consumer project builds against the prefix and runs, loading the libraries from it.
include(${CMAKE_CURRENT_LIST_DIR}/install_steps.cmake)

step(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G Ninja -DCMAKE_BUILD_TYPE=Release
     -DCMAKE_CXX_COMPILER=${CXX} -DBUILD_SHARED_LIBS=ON -DDEPENGINE_BUILD_TESTS=OFF -DDEPENGINE_BUILD_BENCH=OFF
     -DDEPENGINE_BUILD_EXAMPLES=OFF -DDEPENGINE_WITH_CUDA=OFF -DDEPENGINE_WITH_HIP=OFF)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${CMAKE_COMMAND} --install ${WORK_DIR}/build --prefix ${prefix})

file(STRINGS ${SOURCE_DIR}/engine/version.h version_line REGEX "^#define DEPENGINE_VERSION_STRING ")
string(REGEX MATCH "([0-9]+)\\.([0-9]+)\\.[0-9]+" version "${version_line}")
set(soversion ${CMAKE_MATCH_1}.${CMAKE_MATCH_2})
file(GLOB libraries ${prefix}/lib/libdepengine_*.so)
if(NOT libraries)
  message(FATAL_ERROR "shared install check: no libdepengine_*.so installed in ${prefix}/lib")
endif()
foreach(library IN LISTS libraries)
  get_filename_component(name ${library} NAME)
  step(readelf -d ${library})
  if(NOT out MATCHES "\\(SONAME\\)[^\n]*\\[${name}\\.${soversion}\\]")
    message(FATAL_ERROR "shared install check: ${name} has no SONAME ${name}.${soversion}:\n${out}")
  endif()
  if(NOT out MATCHES "\\((RUNPATH|RPATH)\\)[^\n]*\\[\\$ORIGIN\\]")
    message(FATAL_ERROR "shared install check: ${name} has no RUNPATH $ORIGIN:\n${out}")
  endif()
endforeach()

step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/consumer -G Ninja -DCMAKE_PREFIX_PATH=${prefix}
     -DCMAKE_CXX_COMPILER=${CXX})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
step(${WORK_DIR}/consumer/consumer)
step(ldd ${WORK_DIR}/consumer/consumer)
if(NOT out MATCHES "libdepengine_engine\\.so\\.${soversion} => ${prefix}/lib/")
  message(FATAL_ERROR "shared install check: the consumer does not load depengine from ${prefix}/lib:\n${out}")
endif()
message(STATUS "shared: ${soversion}, consumer loads ${prefix}/lib")
