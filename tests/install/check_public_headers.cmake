# check_public_headers(<include dir>): fails (FATAL_ERROR "private headers
# installed: ...") when a header under <include dir> is in a detail/
# folder, is an *_impl.hpp, or includes Asio, Beast or OpenSSL (blanks
# around '#', quotes or angle brackets). Those stay inside the library.
#
# Also runnable as a script on a tree: cmake -DINC=<dir> -P <this file>
# (the layering tests run it on a fixture with one of each).
function(check_public_headers inc)
  file(GLOB_RECURSE files RELATIVE "${inc}" "${inc}/*")
  if(NOT files)
    message(FATAL_ERROR "check_public_headers: nothing under ${inc}")
  endif()
  set(private "")
  foreach(h IN LISTS files)
    if(h MATCHES "(^|/)detail/" OR h MATCHES "_impl\\.hpp$")
      string(APPEND private "  ${h} (a private header)\n")
    endif()
    file(STRINGS "${inc}/${h}" heavy
         REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](boost/asio|boost/beast|openssl)")
    foreach(line IN LISTS heavy)
      string(APPEND private "  ${h}: ${line}\n")
    endforeach()
  endforeach()
  if(private)
    message(FATAL_ERROR "private headers installed:\n${private}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE AND INC)
  check_public_headers("${INC}")
  message(STATUS "check_public_headers: ok")
endif()
