#include "tests/support/ports.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace outbound::testing {

uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0)
      ::close(fd);
    throw std::runtime_error("closed_port: cannot bind a socket");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::vector<uint16_t> closed_ports(std::size_t n) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  auto close_all = [&fds] {
    for (int f : fds)
      ::close(f);
  };
  for (std::size_t i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0
        || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd >= 0)
        ::close(fd);
      close_all();
      throw std::runtime_error("closed_ports: cannot bind a socket");
    }
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  close_all();
  return ports;
}

} // namespace outbound::testing
