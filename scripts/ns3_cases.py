"""Runs message DAGs packet by packet in ns-3 (run by validate_network.py in its own virtual environment).

Reads one JSON document on stdin: {"cases": [{"name", "nodes", "links": [[a, b, bits_per_s, delay_s]],
"messages": [[src, dst, bytes]], "deps": [[pred, succ]], "mtu"}]}; prints {"name": makespan_s} as JSON.
Hosts and switches are nodes joined by full-duplex point-to-point links; switches forward each packet
(store-and-forward per packet) along a shortest path. The per-packet logic is C++ given to cppyy."""
import json
import sys

from ns import ns  # noqa: F401  (loads the ns-3 libraries into cppyy)
import cppyy

cppyy.cppdef(r"""
#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include <deque>
#include <vector>

namespace validate {
using namespace ns3;

class MessageDag {
 public:
  MessageDag(int nodes, uint32_t mtu) : mtu_(mtu), payload_(mtu, 0) {
    Config::SetDefault("ns3::DropTailQueue<Packet>::MaxSize", QueueSizeValue(QueueSize("10000000p")));
    nodes_.Create(nodes);
    first_id_ = nodes_.Get(0)->GetId();
    out_.resize(nodes);
  }
  void AddLink(int a, int b, double bits_per_s, double delay_s) {
    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(bits_per_s))));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu_));
    p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay_s)));
    NetDeviceContainer devs = p2p.Install(nodes_.Get(a), nodes_.Get(b));
    for (int k = 0; k < 2; ++k)
      devs.Get(k)->SetReceiveCallback(MakeCallback(&MessageDag::Receive, this));
    out_[a].push_back({b, devs.Get(0)});
    out_[b].push_back({a, devs.Get(1)});
  }
  int AddMessage(int src, int dst, double bytes) {
    msgs_.push_back(Msg{src, dst, static_cast<uint64_t>(bytes), 0, 0, {}, -1.0});
    return static_cast<int>(msgs_.size()) - 1;
  }
  void AddDep(int pred, int succ) {
    msgs_[pred].succ.push_back(succ);
    ++msgs_[succ].pending;
  }
  double Run() {
    Route();
    for (size_t m = 0; m < msgs_.size(); ++m)
      if (msgs_[m].pending == 0) Simulator::ScheduleNow(&MessageDag::Start, this, static_cast<int>(m));
    Simulator::Run();
    double end = 0;
    for (const Msg& m : msgs_) end = m.done_s < 0 || end < 0 ? -1.0 : std::max(end, m.done_s);
    Simulator::Destroy();
    return drops_ ? -2.0 : end;
  }

 private:
  struct Msg {
    int src, dst;
    uint64_t bytes, received;
    int pending;
    std::vector<int> succ;
    double done_s;
  };

  // next_[node][dst]: the device leaving `node` on a shortest path to `dst` (BFS from dst).
  void Route() {
    const int n = nodes_.GetN();
    next_.assign(n, std::vector<Ptr<NetDevice>>(n));
    for (int dst = 0; dst < n; ++dst) {
      std::vector<int> dist(n, -1);
      std::deque<int> queue{dst};
      dist[dst] = 0;
      while (!queue.empty()) {
        const int v = queue.front();
        queue.pop_front();
        for (auto& [u, dev_unused] : out_[v]) {
          if (dist[u] >= 0) continue;
          dist[u] = dist[v] + 1;
          for (auto& [w, dev] : out_[u])
            if (w == v) { next_[u][dst] = dev; break; }
          queue.push_back(u);
        }
      }
    }
  }

  void Start(int m) {
    Msg& msg = msgs_[m];
    uint64_t left = msg.bytes;
    std::memcpy(payload_.data(), &m, sizeof(m));
    do {
      const uint32_t size = static_cast<uint32_t>(std::max<uint64_t>(sizeof(m), std::min<uint64_t>(left, mtu_)));
      Forward(msg.src, Create<Packet>(payload_.data(), size), msg.dst);
      left -= std::min<uint64_t>(left, mtu_);
    } while (left > 0);
  }

  void Forward(int node, Ptr<Packet> packet, int dst) {
    if (!next_[node][dst]->Send(packet, Mac48Address::GetBroadcast(), 0x0800)) ++drops_;
  }

  bool Receive(Ptr<NetDevice> dev, Ptr<const Packet> packet, uint16_t, const Address&) {
    int m = 0;
    packet->CopyData(reinterpret_cast<uint8_t*>(&m), sizeof(m));
    Msg& msg = msgs_[m];
    const int node = static_cast<int>(dev->GetNode()->GetId() - first_id_);
    if (node != msg.dst) {
      Forward(node, packet->Copy(), msg.dst);
      return true;
    }
    msg.received += packet->GetSize();
    if (msg.received >= msg.bytes && msg.done_s < 0) {
      msg.done_s = Simulator::Now().GetSeconds();
      for (int s : msg.succ)
        if (--msgs_[s].pending == 0) Start(s);
    }
    return true;
  }

  uint32_t mtu_;
  uint32_t first_id_ = 0;
  std::vector<uint8_t> payload_;
  NodeContainer nodes_;
  std::vector<std::vector<std::pair<int, Ptr<NetDevice>>>> out_;
  std::vector<std::vector<Ptr<NetDevice>>> next_;
  std::vector<Msg> msgs_;
  uint64_t drops_ = 0;
};
}  // namespace validate
""")


def run_case(case):
    dag = cppyy.gbl.validate.MessageDag(case["nodes"], case["mtu"])
    for a, b, rate, delay in case["links"]:
        dag.AddLink(a, b, rate, delay)
    for src, dst, size in case["messages"]:
        dag.AddMessage(src, dst, size)
    for pred, succ in case["deps"]:
        dag.AddDep(pred, succ)
    return dag.Run()


def main():
    cases = json.load(sys.stdin)["cases"]
    print(json.dumps({case["name"]: run_case(case) for case in cases}))


if __name__ == "__main__":
    main()
