# Shared by the install checks (check_install.cmake, check_shared.cmake), included after they set WORK_DIR.
# step(COMMAND...): runs COMMAND and fails the check unless it exits with 0; leaves its output in `out`.
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "install check failed at: ${ARGN}\n${output}")
  endif()
  set(out "${output}" PARENT_SCOPE)
endfunction()

# A fresh scratch folder, and the prefix installs go to.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
