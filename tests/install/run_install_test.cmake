# Install test (README, "Using the client"): installs the build into a fresh
# prefix, then configures, builds and runs the consumer project of this
# folder against it with find_package(outbound).
#
# cmake -DBUILD_DIR=<outbound build tree> -DWORK_DIR=<scratch dir>
#       -DCXX=<compiler> [-DCONFIG=<config>] [-DEXTRA_FLAGS=<flags>]
#       -P run_install_test.cmake
foreach(var BUILD_DIR WORK_DIR CXX)
  if(NOT ${var})
    message(FATAL_ERROR "run_install_test.cmake: ${var} is not set")
  endif()
endforeach()
set(src "${CMAKE_CURRENT_LIST_DIR}")
set(prefix "${WORK_DIR}/prefix")
set(consumer "${WORK_DIR}/consumer")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "install test: '${cmd}' failed (${rc})")
  endif()
endfunction()

set(config_args)
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}"
    ${config_args})
# The package files land in <prefix>/<libdir>/cmake/outbound (libdir is
# lib or lib/<multiarch>, chosen by GNUInstallDirs at configure time).
file(GLOB_RECURSE found_config "${prefix}/*/outboundConfig.cmake")
file(GLOB_RECURSE found_findcaf "${prefix}/*/cmake/outbound/FindCAF.cmake")
if(NOT found_config OR NOT found_findcaf)
  message(FATAL_ERROR "install test: outboundConfig.cmake or FindCAF.cmake "
                      "missing under ${prefix}")
endif()
if(NOT EXISTS "${prefix}/include/outbound/actors/client/service_client.hpp")
  message(FATAL_ERROR "install test: headers missing under ${prefix}")
endif()

run(${CMAKE_COMMAND} -S "${src}" -B "${consumer}"
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_COMPILER=${CXX}"
    "-DCMAKE_BUILD_TYPE=${CONFIG}"
    "-DCMAKE_CXX_FLAGS=${EXTRA_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
run(${CMAKE_COMMAND} --build "${consumer}")
run("${consumer}/consumer")
message(STATUS "install test: consumer built against ${prefix} and passed")
