# Layering check (docs/ARCHITECTURE.md, "Folders and layers"): the include lines of each
# folder name only the layers below it.
#
#   core/     CAF-, Asio- and Beast-free; never includes actors/ or metrics/
#   metrics/  reads value types from core/ and protocol/; never includes
#             actors/ (the actors include metrics/, not the other way round)
#             nor CAF
#   protocol/ never includes actors/ or metrics/
#
# cmake -DSRC=<source tree> -P check_layers.cmake
if(NOT SRC)
  message(FATAL_ERROR "check_layers.cmake: SRC is not set")
endif()

set(problems "")
function(forbid folder regex why)
  file(GLOB_RECURSE files "${SRC}/${folder}/*.hpp" "${SRC}/${folder}/*.cpp")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" hits REGEX "${regex}")
    foreach(h IN LISTS hits)
      file(RELATIVE_PATH rel "${SRC}" "${f}")
      string(APPEND problems "  ${rel}: ${h}  (${why})\n")
    endforeach()
  endforeach()
  set(problems "${problems}" PARENT_SCOPE)
endfunction()

forbid(core "^#include [\"<](actors|metrics)/" "core is the lowest layer")
forbid(core "^#include <(caf|boost/asio|boost/beast)/" "core is CAF- and Asio-free")
forbid(metrics "^#include [\"<]actors/" "metrics reads core/ value types")
forbid(metrics "^#include <caf/" "metrics is CAF-free")
forbid(protocol "^#include [\"<](actors|metrics)/" "protocol is below the actors")

if(problems)
  message(FATAL_ERROR "layering check failed:\n${problems}")
endif()
message(STATUS "layering check: ok")
