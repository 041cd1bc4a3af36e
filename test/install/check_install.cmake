# Installs the build tree at BUILD_DIR into a scratch prefix under WORK_DIR, then uses it as a user would:
#   1. find_package(depengine), build the consumer project against it and run it;
#   2. the same on a machine without the CUDA toolkit (find_package(CUDAToolkit) disabled), asking for the CPU
#      components only: a CUDA build of depengine must not need CUDA for them;
#   3. a component that does not exist: configuring must fail and say which, and what the components are;
#   4. pkg-config: build the consumer's main.cpp with `pkg-config --cflags --libs depengine` (and of depengine-mpi,
#      when MPI was built) and run it, the consumer's own colliding headers first on the path;
#   5. the architecture page the installed headers cite is installed at the path they cite.
include(${CMAKE_CURRENT_LIST_DIR}/install_steps.cmake)

# Configures, builds and runs the consumer in WORK_DIR/<name>, with extra configure arguments.
function(consumer name)
  step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/${name} -G Ninja -DCMAKE_PREFIX_PATH=${prefix}
       -DCMAKE_CXX_COMPILER=${CXX} ${ARGN})
  step(${CMAKE_COMMAND} --build ${WORK_DIR}/${name})
  step(${WORK_DIR}/${name}/consumer)
  message(STATUS "${name}: ${out}")
endfunction()

step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
consumer(find_package)
consumer(without_cuda -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON "-DCONSUMER_COMPONENTS=engine\;threadpool")

execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/bad_component -G Ninja
                        -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} -DCONSUMER_COMPONENTS=no_such_thing
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(REGEX REPLACE "[ \n]+" " " flat "${out}")  # CMake wraps the message
if(status EQUAL 0 OR NOT flat MATCHES "component 'no_such_thing' is not one of depengine's components \\(.*threadpool")
  message(FATAL_ERROR "install check: find_package(depengine COMPONENTS no_such_thing) should fail and say why; it "
                      "exited with ${status}:\n${out}")
endif()

set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
step(pkg-config --modversion depengine)
string(STRIP "${out}" version)
foreach(package depengine depengine-mpi)
  if(package STREQUAL "depengine-mpi" AND NOT EXISTS ${prefix}/lib/pkgconfig/depengine-mpi.pc)
    continue()  # a build without MPI
  endif()
  step(pkg-config --cflags --libs ${package})
  separate_arguments(flags UNIX_COMMAND "${out}")
  if("${flags}" MATCHES "-std=")
    message(FATAL_ERROR "install check: pkg-config ${package} imposes a language standard on the consumer: ${out}")
  endif()
  step(${CXX} -std=c++20 -I${CONSUMER_DIR}/collide ${CONSUMER_DIR}/main.cpp -o ${WORK_DIR}/pkg_config_${package}
       "-DDEPENGINE_EXPECTED_VERSION=\"${version}\"" ${flags})
  step(${WORK_DIR}/pkg_config_${package})
  message(STATUS "pkg-config ${package}: ${out}")
endforeach()

if(NOT EXISTS ${prefix}/include/depengine/docs/architecture.md)
  message(FATAL_ERROR "install check: the installed headers cite docs/architecture.md, which is not installed")
endif()
