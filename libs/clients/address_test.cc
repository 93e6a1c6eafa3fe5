#include "libs/clients/address.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace herd::clients {
namespace {

TEST(AddressTest, ParsesLists) {
  auto l = ParseAddressList(" a:1, b:2,,a:1 ", "workers");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(*l, (std::vector<std::string>{"a:1", "b:2"}));
  auto empty = ParseAddressList("", "workers");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  auto v6 = ParseAddressList("[::1]:80", "workers");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(*v6, (std::vector<std::string>{"[::1]:80"}));
}

TEST(AddressTest, RefusesItemsWithoutHostOrPort) {
  for (const char* bad : {"a", "a:1,nohost", "a:0", "a:65536", ":80", "a:x", "a:-1"}) {
    auto l = ParseAddressList(bad, "draft_workers");
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(ParseAddressList("a", "workers").status().message(), "workers: 'a' is not HOST:PORT");
}

TEST(AddressTest, ResolvesNames) {
  auto r = ResolveAddresses("localhost:4321", "workers_dns");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(std::find(r->begin(), r->end(), "127.0.0.1:4321"), r->end());
  EXPECT_TRUE(std::is_sorted(r->begin(), r->end()));
  auto ip = ResolveAddresses("127.0.0.1:80", "workers_dns");
  ASSERT_TRUE(ip.ok()) << ip.status();
  EXPECT_EQ(*ip, (std::vector<std::string>{"127.0.0.1:80"}));
  auto v6 = ResolveAddresses("[::1]:80", "workers_dns");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(*v6, (std::vector<std::string>{"[::1]:80"}));
}

TEST(AddressTest, ResolveErrors) {
  EXPECT_EQ(ResolveAddresses("localhost", "workers_dns").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveAddresses("localhost", "workers_dns").status().message(),
            "workers_dns: 'localhost' is not NAME:PORT");
  EXPECT_EQ(ResolveAddresses("localhost:0", "workers_dns").status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status s = ResolveAddresses("no-such-host.invalid:80", "draft_workers_dns").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message().rfind("draft_workers_dns: cannot resolve 'no-such-host.invalid': ", 0), 0u) << s;
}

}  // namespace
}  // namespace herd::clients
