# Layering check (docs/ARCHITECTURE.md, "Folders and layers"): the include
# lines of each folder name only what its layer may use.
#
#   core/     CAF-, Asio-, Beast- and OpenSSL-free; of the other folders it
#             includes only config/ and the protocol value headers
#             (errors, http_types, json_parse, json_number), never actors/
#             or metrics/
#   config/   never includes actors/, metrics/, CAF, Asio, Beast, OpenSSL
#   metrics/  reads value types from core/ and protocol/; never includes
#             actors/ (the actors include metrics/, not the other way
#             round) nor CAF
#   protocol/ never includes actors/ or metrics/
#
# Every C++ file of a folder is read (.hpp .h .ipp .inl .cpp); an include
# line may have blanks around '#' and use quotes or angle brackets. A folder
# with no file fails (a renamed folder must not pass silently).
#
# cmake -DSRC=<source tree> -P check_layers.cmake
if(NOT SRC)
  message(FATAL_ERROR "check_layers.cmake: SRC is not set")
endif()

set(inc "^[ \t]*#[ \t]*include[ \t]*[<\"]")
set(heavy "(caf|boost/asio|boost/beast|openssl)/")
set(problems "")

function(scan folder out_files)
  file(GLOB_RECURSE files "${SRC}/${folder}/*.hpp" "${SRC}/${folder}/*.h"
       "${SRC}/${folder}/*.ipp" "${SRC}/${folder}/*.inl"
       "${SRC}/${folder}/*.cpp")
  if(NOT files)
    message(FATAL_ERROR "layering check: no source file under ${SRC}/${folder}")
  endif()
  set(${out_files} "${files}" PARENT_SCOPE)
endfunction()

# forbid(<folder> <regex after the include prefix> <why> [ALLOW <regex>])
function(forbid folder regex why)
  cmake_parse_arguments(arg "" "ALLOW" "" ${ARGN})
  scan(${folder} files)
  foreach(f IN LISTS files)
    file(STRINGS "${f}" hits REGEX "${inc}${regex}")
    foreach(h IN LISTS hits)
      if(arg_ALLOW AND h MATCHES "${inc}${arg_ALLOW}")
        continue()
      endif()
      file(RELATIVE_PATH rel "${SRC}" "${f}")
      string(APPEND problems "  ${rel}: ${h}  (${why})\n")
    endforeach()
  endforeach()
  set(problems "${problems}" PARENT_SCOPE)
endfunction()

forbid(core "(actors|metrics|hub|apps)/" "core is below the actors and the metrics")
forbid(core "${heavy}" "core is free of CAF, Asio, Beast and OpenSSL")
forbid(core "protocol/" "core uses only the protocol value headers"
       ALLOW "protocol/(errors|http_types|json_parse|json_number)\\.hpp")
forbid(config "(actors|metrics|hub|apps)/" "config is below the actors")
forbid(config "${heavy}" "config is free of CAF, Asio, Beast and OpenSSL")
forbid(metrics "(actors|hub|apps)/" "metrics reads core/ value types")
forbid(metrics "caf/" "metrics is CAF-free")
forbid(protocol "(actors|metrics|hub|apps)/" "protocol is below the actors")

if(problems)
  message(FATAL_ERROR "layering check failed:\n${problems}")
endif()
message(STATUS "layering check: ok")
