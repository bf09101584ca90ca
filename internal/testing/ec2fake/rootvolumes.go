package ec2fake

import (
	"sort"
	"time"
)

// Root volume replacement (R77): CreateReplaceRootVolumeTask gives a running instance a new root volume made
// from an image of its architecture, keeping the instance, its id, its network interfaces and addresses and its
// instance profile; the instance reboots onto the new volume while the task is in progress, and its block
// device mapping names the new volume once the task has succeeded. DescribeReplaceRootVolumeTasks reads tasks
// back, and moves them along (Timing.RootVolumePolls), as DescribeInstances moves instances.

// Task states ("EC2 API Reference: ReplaceRootVolumeTask", taskState).
const (
	TaskPending    = "pending"
	TaskInProgress = "in-progress"
	TaskSucceeded  = "succeeded"
)

// RootVolumeTask is a root volume replacement task as the fake holds it.
type RootVolumeTask struct {
	ID, InstanceID, ImageID string
	DeleteReplaced          bool
	State                   string
	// OldVolumeID and NewVolumeID are the root volume replaced and its replacement (made when the task
	// succeeds).
	OldVolumeID, NewVolumeID string
	Tags                     map[string]string
	Start, Complete          time.Time
}

type rootTask struct {
	RootVolumeTask
	params string // the request, for its client token (ensuring idempotency)
	polls  int    // DescribeReplaceRootVolumeTasks calls of the region since the task entered State
}

// replaceRootVolume starts a root volume replacement from an image (R77).
func (s *Server) replaceRootVolume(rg *region, f form) (any, *apiError) {
	token := f.str("ClientToken")
	if len(token) > 64 || !isASCII(token) {
		return nil, ec2Err("InvalidParameterValue", "Value (%s) for parameter clientToken is invalid. The client token must be a string of at most 64 ASCII characters.", token)
	}
	params := f.canonical("ClientToken")
	if id, ok := rg.rootTokens[token]; ok && token != "" {
		// The same token with the same parameters answers the same task; with others it is refused
		// ("Ensuring idempotency in Amazon EC2 API requests").
		if rg.rootTasks[id].params != params {
			return nil, ec2Err("IdempotentParameterMismatch", "The client token %s has already been used with a different request.", token)
		}
		return &replaceRootXML{Task: rootTaskXML(rg.rootTasks[id])}, nil
	}
	switch {
	case f.has("SnapshotId"), f.has("VolumeId"), f.has("VolumeInitializationRate"):
		return nil, notModelled("a root volume restored from a snapshot or a volume")
	case f.str("InstanceId") == "":
		return nil, ec2Err("MissingParameter", "The request must contain the parameter InstanceId")
	case !f.has("ImageId"):
		return nil, notModelled("a root volume restored to its launch state")
	}
	id := f.str("InstanceId")
	if e := checkInstanceIDs(rg, []string{id}); e != nil {
		return nil, e
	}
	in := rg.instances[id]
	img, e := imageOf(rg, f.str("ImageId"))
	if e != nil {
		return nil, e
	}
	deleteReplaced, _, e := f.boolean("DeleteReplacedRootVolume")
	if e != nil {
		return nil, e
	}
	tags, e := tagsFor(f, "replace-root-volume-task")
	if e != nil {
		return nil, e
	}
	switch {
	case in.State != StateRunning:
		return nil, ec2Err("IncorrectInstanceState", "The instance '%s' is not in a state from which its root volume can be replaced.", id)
	case img.Architecture != in.Architecture:
		return nil, ec2Err("InvalidParameterCombination", "The AMI '%s' (%s) does not have the same architecture as the instance '%s' (%s).", img.ID, img.Architecture, id, in.Architecture)
	case rg.replacing(id) != nil:
		return nil, ec2Err("IncorrectState", "The instance '%s' already has a root volume replacement task in progress.", id)
	}
	t := &rootTask{RootVolumeTask: RootVolumeTask{
		ID: s.nextID("replacevol"), InstanceID: id, ImageID: img.ID, DeleteReplaced: deleteReplaced, State: TaskPending,
		OldVolumeID: in.VolumeID, Tags: copyTags(tags), Start: s.now(),
	}, params: params}
	if rg.rootTasks == nil {
		rg.rootTasks, rg.rootTokens = map[string]*rootTask{}, map[string]string{}
	}
	rg.rootTasks[t.ID] = t
	if token != "" {
		rg.rootTokens[token] = t.ID
	}
	return &replaceRootXML{Task: rootTaskXML(t)}, nil
}

// replacing is the instance's task that has not ended, or nil. The caller holds s.mu.
func (rg *region) replacing(instanceID string) *rootTask {
	for _, t := range rg.rootTasks {
		if t.InstanceID == instanceID && t.State != TaskSucceeded {
			return t
		}
	}
	return nil
}

// advanceRootTasks moves each task on by one poll: pending until the replacement volume is made, in progress
// while the instance reboots onto it, then succeeded, the instance's root volume the new one and the old one
// deleted or left detached. An instance that stopped being running meanwhile holds its task where it is. The
// caller holds s.mu.
func (s *Server) advanceRootTasks(rg *region) {
	for _, id := range sortedKeys(rg.rootTasks) {
		t := rg.rootTasks[id]
		in := rg.instances[t.InstanceID]
		if t.State == TaskSucceeded || in == nil || in.State != StateRunning {
			continue
		}
		if t.polls++; t.polls < s.timing.RootVolumePolls {
			continue
		}
		t.polls = 0
		switch t.State {
		case TaskPending:
			t.State = TaskInProgress
		case TaskInProgress:
			t.State, t.Complete = TaskSucceeded, s.now()
			vol := &Volume{ID: s.nextID("vol"), InstanceID: in.ID}
			rg.volumes[vol.ID] = vol
			t.NewVolumeID, in.VolumeID = vol.ID, vol.ID
			if old := rg.volumes[t.OldVolumeID]; old != nil {
				if t.DeleteReplaced {
					delete(rg.volumes, old.ID)
				} else {
					old.InstanceID = ""
				}
			}
		}
	}
}

// rebooting reports whether the instance is rebooting onto a new root volume: its health checks fail meanwhile
// (R74, R77). The caller holds s.mu.
func (rg *region) rebooting(instanceID string) bool {
	t := rg.replacing(instanceID)
	return t != nil && t.State == TaskInProgress
}

var rootTaskFilters = map[string]bool{"instance-id": true}

// describeRootTasks lists tasks by id or filter, oldest first (R77).
func (s *Server) describeRootTasks(rg *region, f form) (any, *apiError) {
	s.advanceRootTasks(rg)
	ids := f.list("ReplaceRootVolumeTaskId")
	for _, id := range ids {
		if rg.rootTasks[id] == nil {
			return nil, ec2Err("InvalidReplaceRootVolumeTaskId.NotFound", "The root volume replacement task ID '%s' does not exist.", id)
		}
	}
	filters, e := f.filters(rootTaskFilters)
	if e != nil {
		return nil, e
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var list []*rootTask
	for _, t := range rg.tasksInOrder() {
		fields := func(name string) []string { return []string{t.InstanceID} }
		if (len(ids) == 0 || want[t.ID]) && matches(filters, fields, t.Tags) {
			list = append(list, t)
		}
	}
	page, next, e := paginate(f, "DescribeReplaceRootVolumeTasks", list, 1, 50)
	if e != nil {
		return nil, e
	}
	out := &describeRootTasksXML{NextToken: next}
	for _, t := range page {
		out.Tasks.Items = append(out.Tasks.Items, rootTaskXML(t))
	}
	return out, nil
}

// RootVolumeTasks are the region's root volume replacement tasks, oldest first.
func (s *Server) RootVolumeTasks(region string) []RootVolumeTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []RootVolumeTask
	for _, rt := range s.mustRegion(region).tasksInOrder() {
		t := rt.RootVolumeTask
		t.Tags = copyTags(t.Tags)
		out = append(out, t)
	}
	return out
}

// tasksInOrder are the region's tasks, oldest first (by id within the same start). The caller holds s.mu.
func (rg *region) tasksInOrder() []*rootTask {
	list := make([]*rootTask, 0, len(rg.rootTasks))
	for _, t := range rg.rootTasks {
		list = append(list, t)
	}
	sort.Slice(list, func(i, j int) bool {
		if !list[i].Start.Equal(list[j].Start) {
			return list[i].Start.Before(list[j].Start)
		}
		return list[i].ID < list[j].ID
	})
	return list
}

type replaceRootVolumeTaskXML struct {
	ID             string       `xml:"replaceRootVolumeTaskId"`
	InstanceID     string       `xml:"instanceId"`
	State          string       `xml:"taskState"`
	StartTime      string       `xml:"startTime"`
	CompleteTime   string       `xml:"completeTime,omitempty"`
	ImageID        string       `xml:"imageId,omitempty"`
	DeleteReplaced bool         `xml:"deleteReplacedRootVolume"`
	Tags           *set[tagXML] `xml:"tagSet,omitempty"`
}

func rootTaskXML(t *rootTask) replaceRootVolumeTaskXML {
	x := replaceRootVolumeTaskXML{ID: t.ID, InstanceID: t.InstanceID, State: t.State, StartTime: t.Start.Format(timeFormat),
		ImageID: t.ImageID, DeleteReplaced: t.DeleteReplaced, Tags: tagSet(t.Tags)}
	if !t.Complete.IsZero() {
		x.CompleteTime = t.Complete.Format(timeFormat)
	}
	return x
}

type replaceRootXML struct {
	meta
	Task replaceRootVolumeTaskXML `xml:"replaceRootVolumeTask"`
}

type describeRootTasksXML struct {
	meta
	Tasks     set[replaceRootVolumeTaskXML] `xml:"replaceRootVolumeTaskSet"`
	NextToken string                        `xml:"nextToken,omitempty"`
}
