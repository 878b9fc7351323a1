// The one translation unit that compiles Asio, Asio.SSL and Beast in their
// separate-compilation modes (BOOST_ASIO_SEPARATE_COMPILATION,
// BOOST_BEAST_SEPARATE_COMPILATION via the `outbound_asio_defs` target).
// Every other .cpp that includes Asio/Beast links against these symbols, so a
// change elsewhere in protocol/ does not recompile the libraries themselves.

#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
